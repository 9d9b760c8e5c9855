"""kill -9 at every step, on the host (the token lab's pull sweep is the other half). For each flow (PIV and FIDO2
register, authenticate, PIN change; FIDO2 reset) the flow is first run once with the token counting its requests
(every APDU / every CTAPHID message: the simulators' --pause-dir hook, RequestPause); then for every k the token
stops at request k, tokenbridge is killed with SIGKILL, and the token goes on. Two cuts per k: `before` (the request
reached the token, which drops it unprocessed) and `after` (the token acted and saved its state; the answer is lost).

After each kill: the next command (`authenticators --all --json`) repairs what it can and says so; then
- no PIN try is lost (a right PIN in flight spends none for good: the simulators count tries as the cards do);
- no record is left pending, and every local registration is one the server has (one the server has and the
  client does not is counted as a server orphan: the kill came after the server's accept and before the client's
  confirm, which a client cannot repair alone; reported, not failed);
- the next run of the same flow succeeds.
A summary line per flow gives the number of cut points and what they found (-s shows it)."""
import base64
import hashlib
import json
import os
import re
import subprocess
import time

import pytest

from conftest import TOKENBRIDGE, Card, pin_pipe, tb
from fido2_conn import Key
from test_uaf import RelyingParty

PIV_PIN, PIV_PIN2 = "123456", "654321"
FIDO_PIN, FIDO_PIN2 = "1234", "4321"
SUMMARY = []


class Hook:
    def __init__(self, d):
        self.dir = d
        d.mkdir(exist_ok=True)

    def arm(self, n, mode):
        tmp = self.dir / ".arm"
        tmp.write_text(f"{n} {mode}\n")
        os.rename(tmp, self.dir / "arm")

    def count(self):
        return int((self.dir / "count").read_text())

    def paused(self):
        return (self.dir / "paused").exists()

    def release(self):
        try:
            os.unlink(self.dir / "paused")
        except FileNotFoundError:
            pass


def start(args, env, pins):
    cmd = [TOKENBRIDGE, *args]
    fds = ()
    r = None
    if pins is not None:
        r = pin_pipe(pins)
        cmd += ["--pin-fd", str(r)]
        fds = (r,)
    p = subprocess.Popen(cmd, env=dict(os.environ, **env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, pass_fds=fds, start_new_session=True, stdin=subprocess.DEVNULL)
    if r is not None:
        os.close(r)
    return p


def run_cut(hook, k, mode, args, env, pins, on_line=None):
    """Runs the flow with the token armed to stop at request k; returns True when it stopped there (then the
    process was killed), False when the flow ended first."""
    hook.arm(k, mode)
    p = start(args, env, pins)
    os.set_blocking(p.stderr.fileno(), False)
    buf = ""
    end = time.monotonic() + 30
    try:
        while time.monotonic() < end:
            if hook.paused():
                p.kill()
                p.wait()
                hook.release()
                return True
            if on_line is not None:
                try:
                    buf += os.read(p.stderr.fileno(), 65536).decode(errors="replace")
                except BlockingIOError:
                    pass
                while "\n" in buf:
                    line, buf = buf.split("\n", 1)
                    on_line(line)
            if p.poll() is not None:
                return False
            time.sleep(0.005)
        raise AssertionError(f"cut {k} {mode}: neither paused nor ended")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        hook.release()


class Flow:
    """One flow on one token: `args()`/`pins()` of the run, `after_cut()` checks and readies the next cut."""

    def __init__(self, name, tmp_path, server, kind):
        self.name, self.tmp, self.server, self.kind = name, tmp_path, server, kind
        self.env = {"XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
        self.findings = {}
        self.users = 0
        self.known_orphans = set()  # server keys without a local record, already counted

    def note(self, what):
        self.findings[what] = self.findings.get(what, 0) + 1

    def local(self):
        r = tb("authenticators", "--all", "--json", env=self.env)
        assert r.returncode == 0, r.stderr
        if "interrupted" in r.stderr:
            self.note("repaired by the next command")
        return json.loads(r.stdout)

    def check_consistent(self, label):
        records = self.local()
        assert not [r for r in records if r["state"] == "pending"], f"{label}: pending record left: {records}"
        server_keys = {r["keyID"] for r in self.server.registrations()}
        local_keys = {r["keyID"] for r in records if r["state"] == "registered"}
        assert local_keys <= server_keys, f"{label}: local registrations the server lacks: {local_keys - server_keys}"
        orphans = server_keys - local_keys - self.known_orphans
        if orphans:
            self.note("server orphan")
            self.known_orphans |= orphans
        return records


def sweep(flow, hook, run_args, after_cut, modes=("before", "after"), on_line_factory=None):
    """Counts the flow's requests, then cuts it at every k in each mode; `run_args()` gives (args, pins) of the
    next run, `after_cut(label)` checks the state and runs the flow once more to the end."""
    args, pins = run_args()
    hook.arm(0, "count")
    p = start(args, flow.env, pins)
    on_line = on_line_factory() if on_line_factory else None
    if on_line:
        for line in p.stderr:
            on_line(line)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    n = hook.count()
    after_cut("count run", ran=True)
    cuts = 0
    for mode in modes:
        for k in range(1, n + 1):
            args, pins = run_args()
            if not run_cut(hook, k, mode, args, flow.env, pins, on_line_factory() if on_line_factory else None):
                flow.note("flow ended before the cut")
                after_cut(f"{mode} {k}", ran=True)
                continue
            cuts += 1
            after_cut(f"{mode} {k}", ran=False)
    found = ", ".join(f"{v} {k}" for k, v in sorted(flow.findings.items())) or "nothing"
    line = f"kill sweep {flow.name}: {n} requests, {cuts} cut points ({'+'.join(modes)}), all consistent; {found}"
    SUMMARY.append(line)
    print(line)
    return n, cuts


@pytest.fixture
def server(tmp_path):
    s = RelyingParty(tmp_path)
    yield s
    s.stop()


# --- PIV ------------------------------------------------------------------------------------------------------

@pytest.fixture
def piv(tmp_path):
    hook = Hook(tmp_path / "hook")
    c = Card(tmp_path, 0, 5000000, args=("--pause-dir", str(hook.dir)))
    c.hook = hook
    yield c
    c.stop()


def piv_state(card):
    return json.load(open(card.state))


def piv_pin(card):
    return bytes(b for b in piv_state(card)["pin"] if b != 0xFF).decode()


def piv_tries_full(card, label):
    s = piv_state(card)
    assert s["pinRetries"] == s["pinMaxRetries"], f"{label}: PIN tries {s['pinRetries']} of {s['pinMaxRetries']}"


def free_registrations(flow, keep=()):
    """Forgets every registration but `keep` locally, so PIV slots are reused (the server keeps them)."""
    for r in flow.local():
        if r["state"] == "registered" and r["username"] not in keep:
            assert tb("local", "delete", "--", r["keyID"], env=flow.env).returncode == 0
            flow.known_orphans.add(r["keyID"])  # forgotten here on purpose: the server keeps it


def test_piv_register(tmp_path, server, piv):
    flow = Flow("PIV register", tmp_path, server, "piv")

    def run_args():
        flow.users += 1
        return ["register", "--username", f"u{flow.users}", "--server", server.url], [PIV_PIN]

    def after_cut(label, ran):
        piv_tries_full(piv, label)
        flow.check_consistent(label)
        if not ran:
            args, pins = run_args()
            r = tb(*args, env=flow.env, pins=pins)
            assert r.returncode == 0, f"{label}: next run failed: {r.stderr}"
            flow.check_consistent(label)
        free_registrations(flow)

    sweep(flow, piv.hook, run_args, after_cut)


def test_piv_authenticate(tmp_path, server, piv):
    flow = Flow("PIV authenticate", tmp_path, server, "piv")
    piv.hook.arm(0, "count")
    r = tb("register", "--username", "alice", "--server", server.url, env=flow.env, pins=[PIV_PIN])
    assert r.returncode == 0, r.stderr
    argv = ["authenticate", "--username", "alice", "--server", server.url]

    def after_cut(label, ran):
        piv_tries_full(piv, label)
        flow.check_consistent(label)
        if not ran:
            r = tb(*argv, env=flow.env, pins=[PIV_PIN])
            assert r.returncode == 0, f"{label}: next run failed: {r.stderr}"

    sweep(flow, piv.hook, lambda: (argv, [PIV_PIN]), after_cut)


def test_piv_pin_change(tmp_path, server, piv):
    flow = Flow("PIV PIN change", tmp_path, server, "piv")

    def run_args():
        cur = piv_pin(piv)
        return ["pin", "change"], [cur, PIV_PIN2 if cur == PIV_PIN else PIV_PIN]

    def after_cut(label, ran):
        piv_tries_full(piv, label)
        if not ran:
            if piv_pin(piv) not in (PIV_PIN, PIV_PIN2):
                raise AssertionError(f"{label}: PIN is neither the old nor the new one")
            args, pins = run_args()
            r = tb(*args, env=flow.env, pins=pins)
            assert r.returncode == 0, f"{label}: next run failed: {r.stderr}"
            assert piv_pin(piv) == pins[1]

    sweep(flow, piv.hook, run_args, after_cut)


# --- FIDO2 ----------------------------------------------------------------------------------------------------

@pytest.fixture
def fido(tmp_path):
    hook = Hook(tmp_path / "hook")
    k = Key(tmp_path, "--pause-dir", str(hook.dir))
    k.hook = hook
    yield k
    k.stop()


def fido_state(key):
    return json.load(open(key.state))


def fido_pin(key):
    h = base64.b64decode(fido_state(key)["pinHash"])
    for p in (FIDO_PIN, FIDO_PIN2):
        if hashlib.sha256(p.encode()).digest()[:len(h)] == h:
            return p
    raise AssertionError("the key's PIN is neither the old nor the new one")


def fido_tries_full(key, label):
    assert fido_state(key)["pinRetries"] == 8, f"{label}: PIN tries {fido_state(key)['pinRetries']} of 8"


def fido_flow(name, tmp_path, server, key):
    flow = Flow(name, tmp_path, server, "fido2")
    flow.env["TOKENBRIDGE_VIRTUAL_FIDO"] = key.sock
    key.hook.arm(0, "count")
    assert tb("pin", "set", env=flow.env, pins=[FIDO_PIN]).returncode == 0
    return flow


def test_fido2_register(tmp_path, server, fido):
    flow = fido_flow("FIDO2 register", tmp_path, server, fido)

    def run_args():
        flow.users += 1
        return ["register", "--username", f"u{flow.users}", "--server", server.url], [FIDO_PIN]

    def after_cut(label, ran):
        fido_tries_full(fido, label)
        flow.check_consistent(label)
        if not ran:
            args, pins = run_args()
            r = tb(*args, env=flow.env, pins=pins)
            assert r.returncode == 0, f"{label}: next run failed: {r.stderr}"
            flow.check_consistent(label)

    sweep(flow, fido.hook, run_args, after_cut)


def test_fido2_authenticate(tmp_path, server, fido):
    flow = fido_flow("FIDO2 authenticate", tmp_path, server, fido)
    r = tb("register", "--username", "alice", "--server", server.url, env=flow.env, pins=[FIDO_PIN])
    assert r.returncode == 0, r.stderr
    argv = ["authenticate", "--username", "alice", "--server", server.url]

    def after_cut(label, ran):
        fido_tries_full(fido, label)
        flow.check_consistent(label)
        if not ran:
            r = tb(*argv, env=flow.env, pins=[FIDO_PIN])
            assert r.returncode == 0, f"{label}: next run failed: {r.stderr}"

    sweep(flow, fido.hook, lambda: (argv, [FIDO_PIN]), after_cut)


def test_fido2_pin_change(tmp_path, server, fido):
    flow = fido_flow("FIDO2 PIN change", tmp_path, server, fido)

    def run_args():
        cur = fido_pin(fido)
        return ["pin", "change"], [cur, FIDO_PIN2 if cur == FIDO_PIN else FIDO_PIN]

    def after_cut(label, ran):
        fido_tries_full(fido, label)
        if not ran:
            args, pins = run_args()
            r = tb(*args, env=flow.env, pins=pins)
            assert r.returncode == 0, f"{label}: next run failed: {r.stderr}"
            assert fido_pin(fido) == pins[1]

    sweep(flow, fido.hook, run_args, after_cut)


def test_fido2_reset(tmp_path, server, fido):
    """The guided reset with one dependent registration; the key is replugged when the command asks. After a cut
    the key holds its credential (the reset did not happen: the registration stays) or holds none (it did: the
    next command deregisters and removes the registration, and says so)."""
    flow = fido_flow("FIDO2 reset", tmp_path, server, fido)
    key_id = "fido2-" + re.sub(r"[^a-z0-9]", "-", os.path.basename(fido.sock).lower())

    def ready():
        # A PIN and one registration, so that the reset has something to destroy.
        fido.hook.arm(0, "count")
        if fido_state(fido).get("pinHash") is None:
            assert tb("pin", "set", env=flow.env, pins=[FIDO_PIN]).returncode == 0
        if not [r for r in flow.local() if r["state"] == "registered"]:
            flow.users += 1
            r = tb("register", "--username", f"u{flow.users}", "--server", server.url, env=flow.env,
                   pins=[FIDO_PIN])
            assert r.returncode == 0, r.stderr

    def run_args():
        ready()
        return ["fido2", "reset", "--token", key_id], [key_id]

    def on_line_factory():
        def on_line(line):
            if "Remove the key" in line:
                fido.replug()
        return on_line

    def after_cut(label, ran):
        records = flow.check_consistent(label)
        creds_gone = fido_state(fido)["credentials"] == [] and fido_state(fido).get("pinHash") is None
        registered = [r for r in records if r["state"] == "registered"]
        if creds_gone:
            assert registered == [], f"{label}: the key was reset but registrations remain: {registered}"
        if not ran:
            args, pins = run_args()
            p = start(args, flow.env, pins)
            on_line = on_line_factory()
            for line in p.stderr:
                on_line(line)
            p.wait(timeout=60)
            assert p.returncode == 0, f"{label}: next reset failed"
            assert flow.local() == [] and fido_state(fido)["credentials"] == []

    sweep(flow, fido.hook, run_args, after_cut, on_line_factory=on_line_factory)
