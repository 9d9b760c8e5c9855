"""Kill -9 at each step of the desktop service's token operations (docs/dbus-api.md): ProcessUAFOperation's
registration and authentication, and ProcessOutOfBand's registration, with the virtual PIV card and the virtual
FIDO2 key. The flow's requests to the token are counted once (the simulators' --pause-dir hook, as in
test_kill_sweep.py); then the flow runs with the token stopped at request k, `before` (the token drops the
request) or `after` (it acted and saved; the answer is lost), and one process is killed with SIGKILL while the token waits:
- the service (`tokenbridge serve`): the caller never gets a Response; the next call starts the service again;
- the caller (the desktop program that called ProcessUAFOperation): the service sees it leave the bus and must
  cancel the request, keeping nothing.
After each cut: no PIN try is lost for good; once the next command has run, no record is pending; every local
registration is one the server has (the caller posts a registration's response to the server when it gets one, as
a desktop program does); and the next call through the service succeeds.

Deregistration is not swept: it sends nothing to the token (a local deletion), so it has no request to cut at.
The cut points are a sample: per flow, cut and victim the first request, the last and one between them chosen by a
seed (printed; TB_SWEEP_SEED=S chooses the same again); TB_SWEEP_FULL=1 cuts at every request."""
import json
import os
import random
import subprocess
import sys
import time

import pytest

from conftest import Card, tb, wait_until
from fido2_conn import Key
from relying_party import RelyingParty
from dbus_service import MY_FACET, NAME, PATH, SCRIPTED, Bus, call, has_owner, unwrap
from test_kill_sweep import Hook

PINS = {"piv": "123456", "fido2": "1234"}
FULL = os.environ.get("TB_SWEEP_FULL") == "1"
SEED = os.environ.get("TB_SWEEP_SEED") or str(random.SystemRandom().randrange(1 << 32))
SAMPLE = 3

# The caller: a desktop program in a process of its own, so that it can be killed. It sends what it reads on stdin
# to ProcessUAFOperation (a UAF message) or ProcessOutOfBand (a QR code's text) and prints the Response (code and
# results) as JSON; its unique bus name first, on stderr. Like a desktop program, it stops waiting when the service
# leaves the bus (NameOwnerChanged to no owner): no Response can come then.
CALLER = """
import json, sys, time
from jeepney import DBusAddress, MatchRule, message_bus, new_method_call
from jeepney.io.blocking import open_dbus_connection
address, name, path, method = sys.argv[1:5]
c = open_dbus_connection(bus=address)
print(c.unique_name, file=sys.stderr, flush=True)
rule = MatchRule(type="signal", interface=name + ".Request", member="Response")
c.send_and_get_reply(message_bus.AddMatch(rule))
gone = MatchRule(type="signal", sender="org.freedesktop.DBus", interface="org.freedesktop.DBus",
                 member="NameOwnerChanged", path="/org/freedesktop/DBus")
gone.add_arg_condition(0, name)
c.send_and_get_reply(message_bus.AddMatch(gone))
with c.filter(gone, bufsize=16) as g:
    args = ("", sys.stdin.read(), "", {}) if method == "ProcessUAFOperation" else ("", "qr", sys.stdin.read(), {})
    call = new_method_call(DBusAddress(path, bus_name=name, interface=name), method, "sssa{sv}", args)
    reply = c.send_and_get_reply(call, timeout=60)
    if reply.header.message_type.name == "error":
        print(json.dumps({"error": reply.header.fields.get(4), "body": list(reply.body)}), flush=True)
        sys.exit(1)
    rule = MatchRule(type="signal", interface=name + ".Request", member="Response", path=reply.body[0])
    with c.filter(rule) as q:
        end = time.monotonic() + 120
        while not q:
            while g:
                if g.popleft().body[2] == "":
                    print(json.dumps({"error": "the service left the bus"}), flush=True)
                    sys.exit(1)
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError("no Response in 120 s")
            c.recv_messages(timeout=left)
        code, results = q.popleft().body
print(json.dumps({"code": code, "results": {k: v[1] for k, v in results.items()}}), flush=True)
"""


class ServiceFlow:
    """One operation through the service on one token, with the checks after each cut."""

    def __init__(self, name, tmp_path, kind, token_env, hook, tries_full):
        self.name, self.tmp, self.kind, self.hook, self.tries_full = name, tmp_path, kind, hook, tries_full
        self.server = RelyingParty(tmp_path, ("--facet", MY_FACET))
        (tmp_path / "config" / "tokenbridge").mkdir(parents=True)
        self.scenario = tmp_path / "pinentry.json"
        self.env = {"XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
                    "PINENTRY_PROGRAM": SCRIPTED, "SCRIPTED_PINENTRY_SCENARIO": str(self.scenario), **token_env}
        self.bus = Bus(tmp_path, self.env)
        self.bus.start(idle=0)
        self.users = 0
        self.known_orphans = set()
        self.findings = {}

    def stop(self):
        self.bus.stop()
        self.server.stop()

    def note(self, what):
        self.findings[what] = self.findings.get(what, 0) + 1

    def answer_pin(self, op="Reg"):
        """The scripted pinentry's answers for the next dialog: the token's PIN (after a yes to an out-of-band
        operation's confirmation)."""
        for suffix in (".pos", ".log"):
            p = self.tmp / ("pinentry.json" + suffix)
            if p.exists():
                p.unlink()
        self.scenario.write_text(json.dumps({"answers": (["@ok"] if op.startswith("OOB") else []) + [PINS[self.kind]]}))

    def caller(self, message, op="Reg"):
        self.answer_pin(op)
        method = "ProcessOutOfBand" if op.startswith("OOB") else "ProcessUAFOperation"
        request = self.tmp / "request.json"
        request.write_text(message)
        with open(request) as stdin:
            return subprocess.Popen([sys.executable, "-c", CALLER, self.bus.address, NAME, PATH, method], stdin=stdin,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)

    def message(self, op):
        if op in ("Reg", "OOB-Reg"):
            self.users += 1
        if op == "OOB-Reg":  # a registration dispatched as a QR code: the service redeems it and answers the server
            from test_oob import payload, qr
            return qr(payload(self.server, "Reg", username=f"u{self.users}"))
        if op == "Reg":
            return self.server.request("Reg", username=f"u{self.users}")["uafRequest"]
        return self.server.request("Auth", username="alice")["uafRequest"]

    def run(self, op, label):
        """The operation to its end through the service, its response posted to the server; a Busy answer (the
        service still ending the cut request) is tried again."""
        end = time.monotonic() + 30
        while True:
            p = self.caller(self.message(op), op)
            out, err = p.communicate(timeout=120)
            answer = json.loads(out) if out.strip() else {"error": err}
            if "error" in answer and "Busy" in str(answer.get("error")) and time.monotonic() < end:
                time.sleep(0.2)
                continue
            break
        assert answer.get("code") == 0 and answer["results"].get("errorCode") == 0, f"{label}: {answer} {err}"
        if op.startswith("OOB"):
            return  # the service answered the server itself
        status = self.server.respond(op, json.loads(answer["results"]["message"])["uafProtocolMessage"])
        assert status == 1200, f"{label}: the server answered {status}"

    def post(self, op, p, label):
        """Posts a caller's answer to the server (a registration or an authentication it got a Response for)."""
        out, err = p.communicate(timeout=60)
        answer = json.loads(out)
        assert answer.get("code") == 0, f"{label}: {answer} {err}"
        if op.startswith("OOB"):
            return
        status = self.server.respond(op, json.loads(answer["results"]["message"])["uafProtocolMessage"])
        assert status == 1200, f"{label}: the server answered {status}"

    def left_the_bus(self, name, label):
        """Until the bus daemon has seen the killed caller's connection close. A caller leaves the bus when the daemon
        notices, not when its process dies: a token answering in between is answered to a caller still on the bus
        for all the service can know (it asks the daemon before it keeps a registration)."""
        c = self.bus.connect()
        try:
            wait_until(lambda: not has_owner(c, name), f"{label}: the killed caller off the bus", timeout=30)
        finally:
            c.close()

    def wait_until_idle(self, label):
        """Until the service is done with the token: a cancelled request ends at the operation's next step (a PIN
        request the token is answering is not cut short), so the token's state is read once ListTokens no longer
        names it busy."""
        c = self.bus.connect()
        try:
            wait_until(lambda: all(not str(t.get("reason", "")).startswith("busy")
                                   for t in unwrap(call(c, "ListTokens", "a{sv}", {})[0])),
                       f"{label}: the service done with the token", timeout=30)
        finally:
            c.close()

    def local(self):
        r = tb("authenticators", "--all", "--json", env=self.env)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def check_consistent(self, label, pending_allowed=False):
        records = self.local()
        if not pending_allowed:
            assert not [r for r in records if r["state"] == "pending"], f"{label}: pending record left: {records}"
        server_keys = {r["keyID"] for r in self.server.registrations()}
        local_keys = {r["keyID"] for r in records if r["state"] == "registered"}
        assert local_keys <= server_keys, (f"{label}: local registrations the server lacks: {local_keys - server_keys}"
                                           f"; local: {records}")
        if server_keys - local_keys - self.known_orphans:
            self.note("server orphan")
            self.known_orphans |= server_keys - local_keys
        return records

    def free_slots(self, keep=("alice",)):
        """Forgets every registration but `keep` locally, so PIV slots are reused (the server keeps them)."""
        for r in self.local():
            if r["state"] == "registered" and r["username"] not in keep:
                assert tb("local", "delete", "--", r["keyID"], env=self.env).returncode == 0
                self.known_orphans.add(r["keyID"])

    def cut(self, op, k, mode, victim):
        """One cut; returns False when the flow ended before request k."""
        label = f"{op} {mode} {k}, {victim} killed"
        self.hook.arm(k, mode)
        p = self.caller(self.message(op), op)
        try:
            end = time.monotonic() + 60
            while not self.hook.paused():
                if p.poll() is not None:
                    # The operation made fewer requests this time: it ended, and its caller posts the answer.
                    self.note(f"flow ended before the cut ({mode} {k}, {victim} to be killed)")
                    self.post(op, p, label)
                    self.hook.arm(0, "count")
                    return False
                assert time.monotonic() < end, f"{label}: neither paused nor ended"
                time.sleep(0.005)
            if victim == "service":
                self.bus.service.kill()
                self.bus.service.wait()
            else:
                p.kill()
                p.wait()
                self.left_the_bus(p.stderr.readline().strip(), label)
        finally:
            self.hook.release()
        # The caller that got its Response before the kill (the token stopped in something after it) posts it, as a
        # desktop program does; one killed, or whose service was killed, got none.
        if victim == "service":
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        p.wait()
        if p.returncode == 0:
            self.note("answered before the kill")
            self.post(op, p, label)
        if victim == "service":
            self.bus.start(idle=0)
        self.wait_until_idle(label)
        self.tries_full(label)
        self.check_consistent(label, pending_allowed=True)
        self.run(op, label + ": the next call")
        self.tries_full(label + ", after the next call")
        self.check_consistent(label + ", after the next call")
        if op in ("Reg", "OOB-Reg"):
            self.free_slots()
        return True


def points(flow, n, mode, victim):
    """Every request (TB_SWEEP_FULL=1), or the first, the last (the one that waits for the PIN's use or a touch)
    and one between them chosen by the seed."""
    every = list(range(1, n + 1))
    if FULL or n <= SAMPLE:
        return every
    return [1, random.Random(f"{SEED}/{flow}/{mode}/{victim}").randrange(2, n), n]


def sweep(flow, op):
    # Counted in the state each cut run starts from: after a run, and (registration) with its slot given back.
    flow.run(op, "first run")
    if op in ("Reg", "OOB-Reg"):
        flow.free_slots()
    flow.hook.arm(0, "count")
    flow.run(op, "count run")
    n = flow.hook.count()
    assert n > 0, "the operation sent nothing to the token"
    if op in ("Reg", "OOB-Reg"):
        flow.free_slots()
    cuts = 0
    for victim in ("service", "caller"):
        for mode in ("before", "after"):
            for k in points(flow.name, n, mode, victim):
                cuts += flow.cut(op, k, mode, victim)
    found = ", ".join(f"{v} {k}" for k, v in sorted(flow.findings.items())) or "nothing"
    which = "every request" if FULL else f"a sample, seed {SEED}"
    print(f"\nservice kill sweep {flow.name}: {n} requests, {cuts} cuts ({which}; service and caller killed, "
          f"before and after), all consistent; {found}")


@pytest.fixture
def piv_flow(tmp_path):
    hook = Hook(tmp_path / "hook")
    card = Card(tmp_path, 0, 5000000, args=("--pause-dir", str(hook.dir)))

    def tries_full(label):
        s = json.load(open(card.state))
        assert s["pinRetries"] == s["pinMaxRetries"], f"{label}: PIN tries {s['pinRetries']} of {s['pinMaxRetries']}"

    flows = []

    def make(name):
        flows.append(ServiceFlow(name, tmp_path, "piv", {}, hook, tries_full))
        return flows[-1]

    yield make
    for f in flows:
        f.stop()
    card.stop()


@pytest.fixture
def fido2_flow(tmp_path):
    hook = Hook(tmp_path / "hook")
    key = Key(tmp_path, "--pause-dir", str(hook.dir))

    def tries_full(label):
        s = json.load(open(key.state))
        assert s["pinRetries"] == 8, f"{label}: PIN tries {s['pinRetries']} of 8"

    flows = []

    def make(name):
        f = ServiceFlow(name, tmp_path, "fido2", {"TOKENBRIDGE_VIRTUAL_FIDO": key.sock}, hook, tries_full)
        hook.arm(0, "count")
        assert tb("pin", "set", env=f.env, pins=[PINS["fido2"]]).returncode == 0
        flows.append(f)
        return f

    yield make
    for f in flows:
        f.stop()
    key.stop()


@pytest.mark.parametrize("kind", ["piv", "fido2"])
def test_service_register(kind, request):
    flow = request.getfixturevalue(f"{kind}_flow")(f"{kind} register")
    sweep(flow, "Reg")


@pytest.mark.parametrize("kind", ["piv", "fido2"])
def test_service_authenticate(kind, request):
    flow = request.getfixturevalue(f"{kind}_flow")(f"{kind} authenticate")
    flow.hook.arm(0, "count")
    flow.answer_pin()
    alice = flow.server.request("Reg", username="alice")["uafRequest"]
    p = flow.caller(alice)
    out, err = p.communicate(timeout=120)
    answer = json.loads(out)
    assert answer.get("code") == 0, (answer, err)
    assert flow.server.respond("Reg", json.loads(answer["results"]["message"])["uafProtocolMessage"]) == 1200
    sweep(flow, "Auth")


@pytest.mark.parametrize("kind", ["piv", "fido2"])
def test_service_out_of_band_register(kind, request):
    """ProcessOutOfBand with a registration's QR code: the service redeems it, registers and answers the server
    itself; a registration is kept locally only once the server took it."""
    flow = request.getfixturevalue(f"{kind}_flow")(f"{kind} out-of-band register")
    sweep(flow, "OOB-Reg")
