"""Runs inside the lab guest (not collected by pytest): the pull sweep. For each flow, the flow's requests to the
token (CCID APDUs, CTAPHID reports) are counted once (virtual-token's --request-log); then for every k the flow runs
with the token pulled at its k-th request (--unplug-control; the token runs that request and its answer is lost, or
with "dropped" it never reaches the token), the token is plugged back, what the token, the local data and the server
hold is compared, and the same flow runs again, which must succeed.
Usage: guest_pull_sweep.py MODE [--sample N:SEED] FLOW...    MODE: processed or dropped; FLOW: piv-register
piv-authenticate piv-pin-change fido-register fido-authenticate fido-pin-change fido-reset fido-enroll; --sample:
N cut points per flow chosen by SEED (default: every request)
Prints one line per cut point (`cut FLOW k=K ...`, JSON) and one summary line per flow (`flow FLOW ...`, JSON)."""
import json
import os
import random
import subprocess
import sys
import time

from guest_common import BIN, ROOT
from guest_pull_lib import (
    CONTROL, CONTROLS, LOG, LOGS, MEMORY, PINS, PIN_REQUESTS, PORT, VHCI, attach, detach_all, env,
    hidraw, local, local_rows, memory, ports_free, registrations, state_dir, tb, token_state, wait, work)


class Flow:
    def __init__(self, name, url):
        self.name, self.url = name, url
        self.kind = name.split("-")[0]
        self.op = name.split("-", 1)[1]
        self.runs = 0
        self.key = None  # enroll: the physical token's key in the enrollment memory (learnt from the first run)
        self.server_before = set()  # enroll: the RP's keyIDs before the run
        self.remembered_after_cut = None  # enroll: what the cut run left in the memory
        self.cut_before_replug = False  # reset: the cut came before the replug it asks for (which put the key back)

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
        if self.op == "enroll":
            # What tokenbridge-enroll@.service runs for the key's hidraw node (%k), the PIN on --pin-fd instead of
            # pinentry. It takes no --wait (the node names the device): the node is there before it starts.
            return tb("enroll", "--device", hidraw(), "--timeout", "30", pins=[pin])
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
        self.cut_before_replug = False
        for line in p.stderr:
            err.append(line)
            if "Remove the key" in line:
                # Pulled already (the cut came first and the reset went on): this replug plugs it back in.
                self.cut_before_replug = any("unplug=" in l for l in LOG.read_text().splitlines())
                detach_all()
                attach("fido")
        out = p.stdout.read()
        p.wait(timeout=120)
        return subprocess.CompletedProcess(p.args, p.returncode, out, "".join(err))

    def prepare(self, rerun=False):
        """Before each run, outside the counted requests: what a reset erases (a PIN, one registration); for an
        enrollment, nothing remembered of the key (so the run really enrolls), except before the run again after a
        cut, which must see what the cut run left."""
        if self.op == "enroll":
            self.server_before = {r["keyID"] for r in registrations(self.url)}
            if not rerun and memory():
                # `tokenbridge enroll --reset KEY` rewrites the file without the key; the key is the only one
                # here, so the file goes (no process per cut: under TCG each costs most of a second).
                MEMORY.unlink()
            return
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
        if self.op == "enroll":  # udev's unit reads the server and the username from the configuration
            (work / "c" / "tokenbridge").mkdir(parents=True, exist_ok=True)
            (work / "c" / "tokenbridge" / "config.json").write_text(json.dumps(
                {"enroll": {"server": self.url, "username": "enrollee", "onInsert": "auto"}}))
        if self.kind == "fido" and token_state("fido")["pin"] is None:
            p = tb("pin", "set", "--wait", "--timeout", "30", pins=[PINS["fido"][0]])
            assert p.returncode == 0, p.stderr
        if self.op == "authenticate":
            p = tb("register", "--username", "alice", "--server", self.url, "--wait", "--timeout", "30",
                   pins=[token_state(self.kind)["pin"]])
            assert p.returncode == 0, p.stderr

    def check(self, before, cut_line, remembered=True):
        """What the token, the local data and the server hold after a cut: a list of problems (empty: consistent)."""
        problems = []
        after = token_state(self.kind)
        lost = before["tries"] - after["tries"]
        in_flight = any(w in cut_line for w in PIN_REQUESTS[self.kind])
        if lost > (1 if in_flight else 0):
            problems.append(f"{lost} PIN tries lost (request in flight: {cut_line})")
        if self.op == "reset":
            # After a reset the next command repairs what an interrupted one left (its durable intent), and says so:
            # that command is what is checked, once the key is back (a user plugs it in first; the repair asks the
            # key itself, and a key not yet there leaves the record for later).
            hidraw()
            loc = local()
        else:
            # Every other flow leaves its data as it should be by itself: the database is read as it is (no
            # process, which would also repair; each costs most of a second under TCG).
            loc = local_rows()
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
        if self.op == "enroll" and remembered:
            problems += self.check_memory(server, registered)
        return problems

    def learn(self, p):
        """After the counted run (an enrollment): the key it remembered, which `enroll --reset` forgets once here."""
        if self.op != "enroll":
            return
        mem = memory()
        assert list(mem.values()) == ["enrolled"] and f"({list(mem)[0]})" in p.stdout, (mem, p.stdout, p.stderr)
        self.key = list(mem)[0]
        f = tb("enroll", "--reset", self.key)
        assert f.returncode == 0 and memory() == {}, (f.stderr, memory())

    def check_memory(self, server, registered):
        """A cut enrollment is remembered as enrolled only when its registration is complete: exactly one new
        registration at the RP, registered locally (and, by the checks above, its credential on the key)."""
        mem = memory()
        self.remembered_after_cut = mem.get(self.key)
        if set(mem) - {self.key} or self.remembered_after_cut not in (None, "enrolled"):
            return [f"enrollment memory {mem}"]
        new = server - self.server_before
        if self.remembered_after_cut == "enrolled" and (len(new) != 1 or not new <= {a["keyID"] for a in registered}):
            return [f"remembered as enrolled, but new registrations at the RP {sorted(new)}, local "
                    f"{sorted(a['keyID'] for a in registered)}"]
        return []

    def check_rerun(self, again):
        """The run after a cut: it enrolls (one more registration, remembered) when the cut run left nothing
        remembered, and says it was enrolled before (nothing registered) when the cut run had finished; a problem
        list, and the outcome for the summary."""
        if self.op != "enroll" or again.returncode != 0:
            return [], None
        new = {r["keyID"] for r in registrations(self.url)} - self.server_before
        mem = memory()
        if self.remembered_after_cut is None:
            ok = again.stdout.startswith("Enrolled fido2-hidraw") and len(new) == 1 and mem == {self.key: "enrolled"}
            outcome = "enrolled"
        else:
            ok = f"{self.key} was enrolled before" in again.stderr + again.stdout and not new and \
                mem == {self.key: "enrolled"}
            outcome = "enrolled before"
        if ok:
            return [], outcome
        return [f"expected {outcome!r}: stdout {again.stdout.strip()[-200:]!r}, new registrations {sorted(new)}, "
                f"memory {mem}"], outcome


def main():
    mode, names = sys.argv[1], sys.argv[2:]
    sample = None
    if names and names[0] == "--sample":  # --sample N:SEED: N cut points per flow, chosen by SEED
        count, seed = names[1].split(":", 1)
        sample, names = (int(count), seed), names[2:]
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
            sweep(Flow(name, url), mode, sample)
    finally:
        detach_all()
        server.terminate()
        rp.terminate()


def cut_points(flow, requests, sample):
    """Every request of the flow, or (`sample`: N, SEED) N of them chosen by a generator seeded with SEED and the
    flow's name: the same seed cuts at the same points, another seed elsewhere."""
    every = list(range(1, requests + 1))
    if sample is None or sample[0] >= requests:
        return every
    return sorted(random.Random(f"{sample[1]}/{flow}").sample(every, sample[0]))


def sweep(flow, mode, sample=None):
    started = time.monotonic()
    kind = flow.kind
    log, control = LOGS[kind], CONTROLS[kind]
    flow.setup()
    flow.prepare()
    log.write_text("")
    p = flow.run(wait_for_token=True)
    counting_retried = False
    if p.returncode == 10 and not any("unplug=" in l for l in log.read_text().splitlines()):
        # Seen once, right after the previous flow's last re-attach: pcscd still taking the reader in reported a
        # removal to a run no pull was armed for. Counted again once, and said in the summary.
        counting_retried = True
        log.write_text("")
        p = flow.run(wait_for_token=True)
    assert p.returncode == 0, f"{flow.name} fails without a pull: {p.stderr}"
    requests = log.read_text().splitlines()
    flow.learn(p)
    summary = {"flow": flow.name, "mode": mode, "requests": len(requests), "cuts": 0, "not_reached": [],
               "inconsistent": [], "rerun_failed": [], "exit_codes": {}, "messages": {}, "reruns": {},
               "phase_seconds": {"cut run": 0.0, "replug and check": 0.0, "run again": 0.0},
               "counting_run_retried": counting_retried,
               "points": cut_points(flow.name, len(requests), sample), "seed": sample and sample[1]}
    phases = summary["phase_seconds"]
    for k in summary["points"]:
        flow.prepare()
        before = token_state(kind)
        log.write_text("")
        tmp = control.with_suffix(".tmp")
        tmp.write_text(f"{k} {mode}\n")
        tmp.rename(control)
        t0 = time.monotonic()
        p = flow.run()
        t1 = time.monotonic()
        phases["cut run"] += t1 - t0
        seen = log.read_text().splitlines()
        cut = [l for l in seen if "unplug=" in l]
        if not cut:  # the flow ended before its k-th request: it made fewer this time
            control.unlink(missing_ok=True)
            summary["not_reached"].append(k)
            print("cut", json.dumps({"flow": flow.name, "k": k, "reached": False, "rc": p.returncode}), flush=True)
            continue
        summary["cuts"] += 1
        if flow.op == "reset" and flow.cut_before_replug:
            detach_all()  # pulled before the replug the reset asks for: the flow's own replug put it back
        assert wait(ports_free), (f"the pulled device stays on the bus: {VHCI.read_text()}; requests: {seen}; "
                                  f"{p.stderr[-500:]}; server: {(work / 'server.log').read_text()[-800:]}")
        attach(kind)  # the kernel and pcscd take it in while the check below reads what nothing else changes now
        problems = flow.check(before, cut[0])
        message = (p.stderr.strip().splitlines() or [""])[-1]
        summary["exit_codes"][str(p.returncode)] = summary["exit_codes"].get(str(p.returncode), 0) + 1
        summary["messages"].setdefault(message[:200], []).append(k)
        t2 = time.monotonic()
        phases["replug and check"] += t2 - t1
        flow.prepare(rerun=True)
        again = flow.run(wait_for_token=True)
        rerun_problems, outcome = flow.check_rerun(again)
        phases["run again"] += time.monotonic() - t2
        if outcome:
            summary["reruns"].setdefault(outcome, []).append(k)
        if problems:
            summary["inconsistent"].append({"k": k, "request": cut[0], "problems": problems})
        if again.returncode != 0 or rerun_problems:
            summary["rerun_failed"].append({"k": k, "request": cut[0], "rc": again.returncode,
                                            "stderr": again.stderr.strip()[-300:], "problems": rerun_problems})
        print("cut", json.dumps({"flow": flow.name, "k": k, "request": cut[0], "rc": p.returncode, "message": message,
                                 "problems": problems, "rerun": again.returncode,
                                 "rerun_stderr": again.stderr.strip()[-200:] if again.returncode else ""}), flush=True)
    if flow.op == "enroll" and summary["cuts"]:  # what the last run again left (the others: the next cut's check)
        last = flow.check(token_state(kind), "", remembered=False)
        if last:
            summary["inconsistent"].append({"k": "after the last run again", "problems": last})
    detach_all()
    summary["seconds"] = round(time.monotonic() - started, 1)
    summary["phase_seconds"] = {k: round(v, 1) for k, v in phases.items()}
    print("flow", json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
