"""Runs inside the lab guest (not collected by pytest): the pull sweep. For each flow, the flow's requests to the
token (CCID APDUs, CTAPHID reports) are counted once (virtual-token's --request-log); then for every k the flow runs
with the token pulled at its k-th request (--unplug-control; the token runs that request and its answer is lost, or
with "dropped" it never reaches the token), the token is plugged back, what the token, the local data and the server
hold is compared, and the same flow runs again, which must succeed.
Usage: guest_pull_sweep.py MODE FLOW...    MODE: processed or dropped; FLOW: piv-register piv-authenticate
piv-pin-change fido-register fido-authenticate fido-pin-change fido-reset
Prints one line per cut point (`cut FLOW k=K ...`, JSON) and one summary line per flow (`flow FLOW ...`, JSON)."""
import base64
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from guest_common import BIN, ROOT, run_tokenbridge

PORT = "3252"
VHCI = Path("/sys/devices/platform/vhci_hcd.0/status")
work = Path(tempfile.mkdtemp(prefix="pull-", dir="/tmp"))
state_dir = work / "state"
state_dir.mkdir()
LOG = work / "requests.log"
CONTROL = work / "unplug"
env = dict(os.environ, XDG_DATA_HOME=str(work / "d"), XDG_CONFIG_HOME=str(work / "c"))
env.pop("TOKENBRIDGE_VIRTUAL_FIDO", None)
# Device 1-1 is the FIDO2 key (hidraw), 1-2 the PIV card (CCID, through pcscd); each flow attaches only its own.
BUS = {"fido": "1-1", "piv": "1-2"}
STATE = {"fido": state_dir / "1-1.fido.json", "piv": state_dir / "1-2.piv.json"}
LOGS = {"fido": LOG, "piv": Path(f"{LOG}.1-2")}
CONTROLS = {"fido": CONTROL, "piv": Path(f"{CONTROL}.1-2")}
PINS = {"piv": ("123456", "654321"), "fido": ("1234", "4321")}
PIN_REQUESTS = {"piv": ("apdu=00 20", "apdu=00 24", "apdu=00 2C"), "fido": ("clientPIN=04", "clientPIN=05", "clientPIN=09")}


def wait(pred, seconds=30, step=0.05):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return False


def ports_free():
    return all(l.split()[2] == "004" for l in VHCI.read_text().splitlines()[1:] if len(l.split()) > 2)


def attach(kind):
    """Plugs the device in; the next tokenbridge command waits for it (--wait) instead of this polling."""
    for _ in range(50):  # the server may still be ending the previous session of this bus id
        if subprocess.run(["usbip", "--tcp-port", PORT, "attach", "-r", "127.0.0.1", "-b", BUS[kind]],
                          capture_output=True).returncode == 0:
            return
        time.sleep(0.1)
    raise SystemExit(f"cannot attach {kind}")


def detach_all():
    for l in VHCI.read_text().splitlines()[1:]:
        f = l.split()
        if len(f) > 2 and f[2] != "004":
            subprocess.run(["usbip", "detach", "-p", str(int(f[1]))], capture_output=True)
    assert wait(ports_free), "a vhci port stays in use"


def tb(*args, pins=None):
    return run_tokenbridge(env, *args, pins=pins)


def token_state(kind):
    s = json.loads(STATE[kind].read_text())
    if kind == "piv":
        pin = bytes(s["pin"]).decode() if isinstance(s["pin"], list) else base64.b64decode(s["pin"]).decode()
        return {"tries": s["pinRetries"], "pin": pin, "keys": sorted(s["keys"])}
    current = next((p for p in PINS["fido"]
                    if base64.b64encode(hashlib.sha256(p.encode()).digest()[:16]).decode() == s.get("pinHash")), None)
    ids = sorted(base64.urlsafe_b64encode(base64.b64decode(c["userID"])).decode().rstrip("=") for c in s["credentials"])
    return {"tries": s["pinRetries"], "pin": current, "users": ids}


def registrations(url):
    with urllib.request.urlopen(url + "/_admin/registrations", timeout=10) as r:
        return json.loads(r.read())


def local():
    p = tb("authenticators", "--all", "--json")
    return json.loads(p.stdout) if p.returncode == 0 else {"error": p.stderr.strip()}


class Flow:
    def __init__(self, name, url):
        self.name, self.url = name, url
        self.kind = name.split("-")[0]
        self.op = name.split("-", 1)[1]
        self.runs = 0

    def run(self, wait_for_token=False):
        """One run of the flow; the PIN it uses is the token's current one (a cut PIN change may have changed it)."""
        self.runs += 1
        extra = ["--wait", "--timeout", "30"] if wait_for_token else []
        pin = token_state(self.kind)["pin"]
        if self.op == "register":
            return tb("register", "--username", f"u{self.runs}", "--server", self.url, *extra, pins=[pin])
        if self.op == "authenticate":
            return tb("authenticate", "--username", "alice", "--server", self.url, *extra, pins=[pin])
        if self.op == "reset":
            return self.reset(extra)
        other = [p for p in PINS[self.kind] if p != pin][0]
        return tb("pin", "change", *extra, pins=[pin, other])

    def reset(self, extra):
        """fido2 reset: the key id typed on --pin-fd, and at "Remove the key" the replug it asks for (detach, attach)."""
        r, w = os.pipe()
        os.write(w, b"fido2-hidraw0\n")
        os.close(w)
        p = subprocess.Popen([str(BIN / "tokenbridge"), "fido2", "reset", "--token", "fido2-hidraw0", "--pin-fd", str(r),
                              *(extra or ["--timeout", "30"])], env=env, pass_fds=(r,), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        os.close(r)
        err = []
        for line in p.stderr:
            err.append(line)
            if "Remove the key" in line:
                detach_all()
                attach("fido")
        out = p.stdout.read()
        p.wait(timeout=120)
        return subprocess.CompletedProcess(p.args, p.returncode, out, "".join(err))

    def prepare(self):
        """Before each run, outside the counted requests: what a reset erases (a PIN, one registration)."""
        if self.op != "reset":
            return
        if token_state("fido")["pin"] is None:
            p = tb("pin", "set", "--wait", "--timeout", "30", pins=[PINS["fido"][0]])
            assert p.returncode == 0, p.stderr
        self.runs += 1
        p = tb("register", "--username", f"r{self.runs}", "--server", self.url, "--wait", "--timeout", "30",
               pins=[token_state("fido")["pin"]])
        assert p.returncode == 0, p.stderr

    def setup(self):
        attach(self.kind)
        if self.kind == "fido" and token_state("fido")["pin"] is None:
            p = tb("pin", "set", "--wait", "--timeout", "30", pins=[PINS["fido"][0]])
            assert p.returncode == 0, p.stderr
        if self.op == "authenticate":
            p = tb("register", "--username", "alice", "--server", self.url, "--wait", "--timeout", "30",
                   pins=[token_state(self.kind)["pin"]])
            assert p.returncode == 0, p.stderr

    def check(self, before, cut_line):
        """What the token, the local data and the server hold after a cut: a list of problems (empty: consistent)."""
        problems = []
        after = token_state(self.kind)
        lost = before["tries"] - after["tries"]
        in_flight = any(w in cut_line for w in PIN_REQUESTS[self.kind])
        if lost > (1 if in_flight else 0):
            problems.append(f"{lost} PIN tries lost (request in flight: {cut_line})")
        loc = local()
        if isinstance(loc, dict):
            return problems + [f"authenticators: {loc['error']}"]
        server = {r["keyID"] for r in registrations(self.url)}
        registered = [a for a in loc if a.get("state") == "registered"]
        if {a["keyID"] for a in registered} != server:
            problems.append(f"local registrations {sorted(a['keyID'] for a in registered)} vs server {sorted(server)}")
        # A PIV registration that failed stays as "abandoned": the slot stays ours, free, for the next one (by
        # design). A "pending" one belongs to a process that is still writing it: none is running now.
        pending = [a for a in loc if a.get("state") not in ("registered", "abandoned")]
        if pending:
            problems.append(f"{len(pending)} local records left {sorted({a.get('state') for a in pending})}")
        prefix = "piv-" if self.kind == "piv" else "fido2-"
        for a in registered:
            if not a.get("token", "").startswith(prefix):
                continue
            if self.kind == "fido" and a["keyID"] not in after["users"]:
                problems.append(f"registration {a['keyID']} has no credential on the key")
            if self.kind == "piv" and str(a.get("slot", "")).lower() not in [k.lower() for k in after["keys"]]:
                problems.append(f"registration {a['keyID']} in slot {a.get('slot')}: no key on the card")
        return problems


def main():
    mode, names = sys.argv[1], sys.argv[2:]
    server = subprocess.Popen([str(BIN / "virtual-token"), "usbip", "--listen", f"127.0.0.1:{PORT}", "--device", "fido",
                               "--device", "ccid", "--state-dir", str(state_dir), "--request-log", str(LOG),
                               "--unplug-control", str(CONTROL)], stderr=open(work / "server.log", "w"))
    rp = subprocess.Popen([sys.executable, str(ROOT / "Tools" / "rp" / "tokenbridge_rp.py"), "--port", "0",
                           "--port-file", str(work / "rp.port")], stderr=open(work / "rp.log", "w"))
    try:
        assert wait(lambda: subprocess.run(["usbip", "--tcp-port", PORT, "list", "-r", "127.0.0.1"],
                                           capture_output=True).returncode == 0, step=0.2)
        assert wait(lambda: (work / "rp.port").exists() and (work / "rp.port").read_text())
        url = f"http://127.0.0.1:{(work / 'rp.port').read_text()}"
        for name in names:
            sweep(Flow(name, url), mode)
    finally:
        detach_all()
        server.terminate()
        rp.terminate()


def sweep(flow, mode):
    started = time.monotonic()
    kind = flow.kind
    log, control = LOGS[kind], CONTROLS[kind]
    flow.setup()
    flow.prepare()
    log.write_text("")
    p = flow.run(wait_for_token=True)
    assert p.returncode == 0, f"{flow.name} fails without a pull: {p.stderr}"
    requests = log.read_text().splitlines()
    summary = {"flow": flow.name, "mode": mode, "requests": len(requests), "cuts": 0, "not_reached": [],
               "inconsistent": [], "rerun_failed": [], "exit_codes": {}, "messages": {}}
    for k in range(1, len(requests) + 1):
        flow.prepare()
        before = token_state(kind)
        log.write_text("")
        tmp = control.with_suffix(".tmp")
        tmp.write_text(f"{k} {mode}\n")
        tmp.rename(control)
        p = flow.run()
        seen = log.read_text().splitlines()
        cut = [l for l in seen if "unplug=" in l]
        if not cut:  # the flow ended before its k-th request: it made fewer this time
            control.unlink(missing_ok=True)
            summary["not_reached"].append(k)
            print("cut", json.dumps({"flow": flow.name, "k": k, "reached": False, "rc": p.returncode}), flush=True)
            continue
        summary["cuts"] += 1
        if flow.op == "reset" and not wait(ports_free, 5):
            detach_all()  # pulled before the replug the reset asks for: the flow's own replug put it back
        assert wait(ports_free), (f"the pulled device stays on the bus: {VHCI.read_text()}; requests: {seen}; "
                                  f"{p.stderr[-500:]}; server: {(work / 'server.log').read_text()[-800:]}")
        attach(kind)  # the kernel and pcscd take it in while the check below reads what nothing else changes now
        problems = flow.check(before, cut[0])
        message = (p.stderr.strip().splitlines() or [""])[-1]
        summary["exit_codes"][str(p.returncode)] = summary["exit_codes"].get(str(p.returncode), 0) + 1
        summary["messages"].setdefault(message[:200], []).append(k)
        flow.prepare()
        again = flow.run(wait_for_token=True)
        if problems:
            summary["inconsistent"].append({"k": k, "request": cut[0], "problems": problems})
        if again.returncode != 0:
            summary["rerun_failed"].append({"k": k, "request": cut[0], "rc": again.returncode,
                                            "stderr": again.stderr.strip()[-300:]})
        print("cut", json.dumps({"flow": flow.name, "k": k, "request": cut[0], "rc": p.returncode, "message": message,
                                 "problems": problems, "rerun": again.returncode,
                                 "rerun_stderr": again.stderr.strip()[-200:] if again.returncode else ""}), flush=True)
    detach_all()
    summary["seconds"] = round(time.monotonic() - started, 1)
    print("flow", json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
