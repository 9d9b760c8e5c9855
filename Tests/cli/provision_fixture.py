"""A desk of virtual tokens for Tests/cli/test_provision.py: 8 PIV cards and 8 FIDO2 keys (the most one pcscd with
`Tools/with-pcscd --readers 8` serves, as scale_fixture.py) and the reference RP, provisioned with `tokenbridge
provision`. Each scenario prints one JSON object of facts for the test to check:

    Tools/with-pcscd --readers 8 --rp -- python3 Tests/cli/provision_fixture.py SCENARIO [CARDS KEYS]

`full` provisions every token (a 17th row stays pending), opens every sealed PIN with `age -d` and an identity made
here, signs in with each PIN, and reruns the finished journal with every token gone. `kill` kills the run with SIGKILL
at three points (tokens assigned; a PIN set; a registration the server took but had not answered) and reruns it
after each; before the last rerun another command opens the local data (its repair must not lose the pending
record). `faulty` blocks one card's PIN first. `payloads` registers through out-of-band payloads the RP issued
(QR text and links; one expired). `late` runs with `--wait` while tokens are plugged in. `refusals` runs what must be refused. Every child's argv is sampled from
/proc during the runs (`argv`), to be searched for PINs."""
import base64
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from scale_fixture import TOKENBRIDGE, Tokens

SERVER = os.environ.get("TB_SERVER", "")
SERIAL0 = 6_100_000
NEW_PIN = "73914682"  # what a user changes a forced key's PIN to


class Desk:
    def __init__(self, work, cards, keys, latency=None):
        self.work = Path(work)
        self.tokens = Tokens(work)
        for i in range(cards):
            self.tokens.add_card(i, latency=latency)
        for i in range(keys):
            self.tokens.add_key(i, latency=latency)
        self.tokens.wait(cards, keys)
        self.home = {"XDG_DATA_HOME": f"{work}/data", "XDG_CONFIG_HOME": f"{work}/config"}
        subprocess.run(["age-keygen", "-o", str(self.work / "identity.txt")], check=True, capture_output=True)
        self.recipient = subprocess.run(["age-keygen", "-y", str(self.work / "identity.txt")], check=True,
                                        capture_output=True, text=True).stdout.strip()
        self.journal = str(self.work / "journal.sqlite")
        self.argv = set()
        self.sampling = False

    def env(self):
        return self.tokens.env(self.home)

    def plan(self, text):
        (self.work / "plan.csv").write_text(text)
        return str(self.work / "plan.csv")

    def sample_argv(self):
        """Every process's argv, every few ms, while a run goes (the children tokenbridge starts: age). Only this
        run's network namespace (Tools/with-pcscd's): test files beside it in other namespaces (Tools/test's other
        workers) pass test PINs on their peers' command lines (yubico-piv-tool -P), which are not this run's."""
        mine = os.readlink("/proc/self/ns/net")
        while self.sampling:
            for p in Path("/proc").iterdir():
                if p.name.isdigit():
                    try:
                        if os.readlink(p / "ns" / "net") == mine:
                            self.argv.add((p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
                    except OSError:
                        pass
            time.sleep(0.002)

    def start(self, *extra, recipient=True, pin=None, env=None):
        args = [TOKENBRIDGE, "provision", "--plan", str(self.work / "plan.csv"), "--journal", self.journal,
                "--report", str(self.work / "report.json"), "--csv", str(self.work / "report.csv"),
                "--server", SERVER, *extra]
        if recipient:
            args += ["--pin-recipient", self.recipient]
        fds = ()
        if pin is not None:
            r, w = os.pipe()
            os.write(w, (pin + "\n").encode())
            os.close(w)
            args += ["--pin-fd", str(r)]
            fds = (r,)
        p = subprocess.Popen(args, env=env or self.env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, pass_fds=fds, start_new_session=True)
        for fd in fds:
            os.close(fd)
        return p

    def run(self, *extra, recipient=True, pin=None, timeout=300):
        self.sampling = True
        sampler = threading.Thread(target=self.sample_argv)
        sampler.start()
        try:
            p = self.start(*extra, recipient=recipient, pin=pin)
            out, err = p.communicate(timeout=timeout)
        finally:
            self.sampling = False
            sampler.join()
        return {"rc": p.returncode, "stdout": out, "stderr": err}

    def report(self):
        path = self.work / "report.json"
        return json.loads(path.read_text()) if path.exists() else None

    def csv(self):
        path = self.work / "report.csv"
        return path.read_text() if path.exists() else None

    def stages(self):
        if not os.path.exists(self.journal):
            return []
        try:
            with sqlite3.connect(f"file:{self.journal}?mode=ro", uri=True, timeout=30) as c:
                return [r[0] for r in c.execute("SELECT stage FROM plan")]
        except sqlite3.OperationalError:  # not made yet
            return []

    def opened(self, sealed):
        """A sealed PIN opened with `age -d` and this desk's identity (stdin to stdout: no PIN on argv)."""
        r = subprocess.run(["age", "-d", "-i", str(self.work / "identity.txt")], input=sealed, capture_output=True,
                           text=True, timeout=30)
        return r.stdout if r.returncode == 0 else None

    def authenticate(self, username, token, pin):
        r, w = os.pipe()
        os.write(w, (pin + "\n").encode())
        os.close(w)
        p = subprocess.run([TOKENBRIDGE, "authenticate", "--username", username, "--token", token, "--server",
                            SERVER, "--pin-fd", str(r)], env=self.env(), capture_output=True, text=True,
                           pass_fds=(r,), stdin=subprocess.DEVNULL, timeout=60)
        os.close(r)
        return p.returncode

    def change_pin(self, token, old, new):
        r, w = os.pipe()
        os.write(w, f"{old}\n{new}\n".encode())
        os.close(w)
        p = subprocess.run([TOKENBRIDGE, "pin", "change", "--token", token, "--pin-fd", str(r)], env=self.env(),
                           capture_output=True, text=True, pass_fds=(r,), stdin=subprocess.DEVNULL, timeout=60)
        os.close(r)
        return p.returncode

    def facts(self):
        """What the test checks after the last run: report, CSV, registrations at the RP, opened PINs (and whether
        each signs in), the journal's bytes searched for them, every argv seen."""
        report = self.report()
        pins = {}
        works = {}
        forced = {}
        for row in (report or {}).get("rows", []):
            if row["sealedPin"]:
                pin = self.opened(row["sealedPin"])
                pins[row["username"]] = pin
        journal = Path(self.journal).read_bytes() if os.path.exists(self.journal) else b""
        listed = {t["id"]: t for t in self.tokens.listed(self.home)}
        for row in (report or {}).get("rows", []):
            if row["status"] == "done" and row["username"] in pins:
                token = row["serial"] if row["serial"] in listed else f"piv-{row['serial']}"
                if row["kind"] == "fido2" and not token.startswith("fido2-"):
                    token = next(i for i in listed if i.startswith("fido2-"))
                pin = pins[row["username"]]
                if row["kind"] == "fido2":
                    # The key refuses the sealed PIN until it is changed (forcePINChange): the user's first use is
                    # `pin change`, then the new PIN signs in.
                    forced[row["username"]] = (listed[token]["fido2"]["forcePINChange"],
                                               self.authenticate(row["username"], token, pin))
                    changed = self.change_pin(token, pin, NEW_PIN)
                    pin = NEW_PIN if changed == 0 else pin
                works[row["username"]] = self.authenticate(row["username"], token, pin)
        return {"report": report, "csv": self.csv(), "registrations": rp("GET", "/_admin/registrations"),
                "pins": pins, "signIn": works, "forced": forced,
                "pinsInJournal": [u for u, p in pins.items() if p and p.encode() in journal],
                "argv": sorted(self.argv)}

    def stop(self):
        self.tokens.stop()


def rp(method, path, body=None):
    req = urllib.request.Request(SERVER + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read() or b"null")


def plan_rows(cards, keys, extra=1):
    """One row per token and `extra` more: the card piv-(SERIAL0+cards-1) named by serial on the LAST row (assigned
    first all the same), the keys by kind; the rest in order."""
    rows = [f"user{i:02d},,piv," for i in range(cards - 1)]
    rows += [f"key{i:02d},,fido2," for i in range(keys)]
    rows += [f"extra{i:02d},,," for i in range(extra)]
    rows.append(f"serialuser,{SERIAL0 + cards - 1},,")
    return "username,serial,kind,payload\n" + "\n".join(rows) + "\n"


def full(desk, cards, keys):
    desk.plan(plan_rows(cards, keys))
    first = desk.run()
    facts = desk.facts()
    desk.stop()  # a finished journal touches no token: its rerun must not need them
    rerun = desk.run()
    return dict(facts, first=first, rerun=rerun, rerunReport=desk.report())


def event_seen(p, name):
    """Reads the run's --json events as they come until one named `name` (True), or its end (False)."""
    for line in p.stdout:
        try:
            if json.loads(line).get("event") == name:
                return True
        except ValueError:
            continue
    return False


def wait_for(pred, timeout=120):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.005)
    return False


def kill(desk, cards, keys):
    desk.plan(plan_rows(cards, keys, extra=0))
    kills = []
    # 1: once tokens are assigned; 2: once a PIN is set (each as the run's --json events say, read as they come:
    # looking at the journal instead missed whole stages between two looks); 3: a registration the RP took and has
    # not answered yet (it holds the answer 20 s).
    for point in ("assigned", "pinSet", "registered"):
        before = len(rp("GET", "/_admin/registrations"))
        if point == "registered":
            rp("POST", "/_admin/stall-registration", {"seconds": 20, "count": 1})
        p = desk.start("--json")
        if point == "registered":
            seen = wait_for(lambda: len(rp("GET", "/_admin/registrations")) > before or p.poll() is not None)
        else:
            seen = event_seen(p, {"assigned": "assigned", "pinSet": "pin-set"}[point])
        hit = seen and p.poll() is None
        p.send_signal(signal.SIGKILL)
        p.communicate()
        kills.append({"point": point, "hit": hit, "stages": desk.stages()})
    # Another command opens the local data before the rerun (and repairs what the killed run left pending): the
    # rerun must still find the registration the server took.
    kills.append({"other": subprocess.run([TOKENBRIDGE, "accounts"], env=desk.env(), capture_output=True).returncode})
    final = desk.run()
    facts = desk.facts()
    desk.stop()  # a finished journal touches no token: its rerun must not need them
    rerun = desk.run()
    return dict(facts, kills=kills, final=final, rerun=rerun, rerunReport=desk.report())


def held(desk, cards, keys):
    """A registration the server took and had not stored yet when the run was killed (the RP holds its store until
    the same user's next registration response arrives, then stores it first): the rerun finds no registration of
    that row at the server, registers it again, and the first one lands after its check."""
    desk.plan(plan_rows(cards, keys, extra=0))
    rp("POST", "/_admin/hold-registration-store", {"count": 1})
    p = desk.start("--json")
    seen = wait_for(lambda: rp("GET", "/_admin/held-registrations") or p.poll() is not None)
    user = rp("GET", "/_admin/held-registrations")
    hit = seen and bool(user) and p.poll() is None
    p.send_signal(signal.SIGKILL)
    p.communicate()
    final = desk.run()
    return dict(desk.facts(), held=user, hit=hit, final=final)


def faulty(desk, cards, keys):
    # Card 0's PIN blocked before the run (yubico-piv-tool, not our code: three wrong PINs).
    for _ in range(3):
        subprocess.run(["yubico-piv-tool", "-r", "Virtual PCD 00 00", "-a", "verify-pin", "-P", "000000"],
                       capture_output=True)
    desk.plan(plan_rows(cards, keys, extra=0))
    first = desk.run()
    return dict(desk.facts(), first=first)


def refusals(desk, cards, keys):
    out = {}
    desk.plan(plan_rows(cards, keys, extra=0))
    out["noRecipient"] = desk.run(recipient=False)
    out["journalAfterNoRecipient"] = desk.stages()
    out["pinStatus"] = json.loads(subprocess.run([TOKENBRIDGE, "tokens", "--json"], env=desk.env(),
                                                 capture_output=True, text=True).stdout)
    out["parallelZero"] = desk.run("--parallel", "0")
    desk.plan("username,sn\nalice,1\n")
    out["badColumn"] = desk.run()
    desk.plan("username\nsomeone-else\n")
    out["otherPlan"] = desk.run()
    desk.plan(plan_rows(cards, keys, extra=0))
    good, desk.recipient = desk.recipient, "age1thisisnotarecipient"
    desk.journal = str(desk.work / "other.sqlite")
    out["badRecipient"] = desk.run()
    desk.recipient = good
    # Tokens with a site PIN of their own: without --pin-fd refused; with it, registered, no PIN sealed.
    for i in range(cards):
        r, w = os.pipe()
        os.write(w, b"123456\n24681357\n")
        os.close(w)
        subprocess.run([TOKENBRIDGE, "pin", "change", "--token", f"piv-{SERIAL0 + i}", "--pin-fd", str(r)],
                       env=desk.env(), pass_fds=(r,), capture_output=True)
        os.close(r)
    desk.plan("username,kind\n" + "\n".join(f"site{i},piv" for i in range(cards)) + "\n")
    desk.journal = str(desk.work / "site.sqlite")
    out["noPinFd"] = desk.run()
    out["withPinFd"] = desk.run(pin="24681357")
    out["siteReport"] = desk.report()
    out["registrations"] = rp("GET", "/_admin/registrations")
    out["argv"] = sorted(desk.argv)
    return out


def dispatch_payload(username):
    """A registration the RP dispatches for `username` out of band: the QR code's text (base64url of the payload)."""
    t = rp("POST", "/nevisfido/token/create/registration", {"op": "Reg", "context": json.dumps({"username": username})})
    body = {"nma_data": {"token": t["token"], "redeem_url": t["redeem_url"], "data": "Welcome"},
            "nma_data_content_type": "application/json", "nma_data_version": "1"}
    return base64.urlsafe_b64encode(json.dumps(body).encode()).rstrip(b"=").decode(), t["sessionId"]


def payloads(desk, cards, keys):
    """Rows with an out-of-band registration the RP issued for their user, as QR text or as a link; one whose token
    expired before the run (the server refuses it: that row fails alone)."""
    rows, expired = [], None
    for i in range(cards + keys):
        user = f"oob{i:02d}"
        text, session = dispatch_payload(user)
        if i == 1:
            rp("POST", "/_admin/expire", {"sessionId": session})
            expired = user
        link = f"https://app.example/open?dispatchTokenResponse={text}"
        rows.append(f"{user},,{'piv' if i < cards else 'fido2'},{link if i % 2 else text}")
    desk.plan("username,serial,kind,payload\n" + "\n".join(rows) + "\n")
    first = desk.run()
    return dict(desk.facts(), first=first, expired=expired)


def late(desk, cards, keys):
    """`--wait`: one card and one key present at the start, one more of each plugged in while the run waits; a fifth
    row never gets a token, so the wait ends `--timeout` seconds after the last arrival, with that row pending."""
    desk.plan("username,kind\nearlycard,piv\nearlykey,fido2\nlatecard,piv\nlatekey,fido2\nnobody,piv\n")
    late_key = str(desk.work / "key1.sock")
    env = dict(desk.env(), TOKENBRIDGE_VIRTUAL_FIDO=desk.env()["TOKENBRIDGE_VIRTUAL_FIDO"] + ":" + late_key)
    p = desk.start("--wait", "--timeout", "6", env=env)
    waited = wait_for(lambda: desk.stages().count("done") == 2, timeout=120)
    desk.tokens.add_card(1)
    desk.tokens.add_key(1)
    out, err = p.communicate(timeout=300)
    return dict(desk.facts(), first={"rc": p.returncode, "stdout": out, "stderr": err}, waited=waited)


if __name__ == "__main__":
    scenario = sys.argv[1]
    cards, keys = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) == 4 else (8, 8)
    with tempfile.TemporaryDirectory() as work:
        desk = Desk(work, cards, keys)
        try:
            result = {"full": full, "kill": kill, "faulty": faulty, "refusals": refusals, "payloads": payloads,
                      "late": late, "held": held}[scenario](desk, cards, keys)
        finally:
            desk.stop()
        print(json.dumps(result))
