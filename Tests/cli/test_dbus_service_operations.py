"""tokenbridge serve (docs/dbus-api.md), continued: out-of-band payloads, a card pulled mid-operation, a pcscd
restart, desktop notifications, several tokens offered in pinentry, Close during a touch wait, hostile messages. The
harness: dbus_service.py."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from dbus_service import *  # noqa: F401,F403 (the harness and its fixtures; other test files import them from here too)


def test_out_of_band_qr_and_link_run_as_oob_runs_them(card, bus, rps, scenario, tmp_path):
    # ProcessOutOfBand: the same library path as `tokenbridge oob` (UAFEnvironment.outOfBandPayload and .redeem);
    # the user confirms the operation in pinentry first (naming the server and the calling app).
    from test_oob import payload, qr
    server = rps("--facet", MY_FACET)
    c = bus().connect()
    rule = MatchRule(type="signal", interface=REQUEST_IFACE, member="Response")
    c.send_and_get_reply(message_bus.AddMatch(rule))
    scenario(["@ok", "123456"])
    path = call(c, "ProcessOutOfBand", "sssa{sv}", "", "qr", qr(payload(server, "Reg", username="alice")), {})[0]
    code, results, _ = response(c, path)
    assert code == 0 and results["errorCode"] == 0, results
    assert results["operation"] == "Reg" and results["server"] == server.url
    assert [x["username"] for x in server.registrations()] == ["alice"]
    log = pinentry_log(tmp_path)
    assert "CONFIRM" in log and f"Server: {server.url}" in log and f"App: {MY_FACET}" in log
    assert "\\u{1B}[31mBank" in log and "\x1b" not in log  # the payload's data, escaped as the CLI shows it

    # A link; the user says no at the confirmation: cancelled, nothing redeemed, no PIN asked.
    scenario(["@cancel"])
    link = "https://app.example/open?dispatchTokenResponse=" + qr(payload(server, "Auth", username="alice"))
    code, results, _ = response(c, call(c, "ProcessOutOfBand", "sssa{sv}", "", "link", link, {})[0])
    assert code == 1 and results["errorCode"] == 3, results
    assert "GETPIN" not in pinentry_log(tmp_path)
    # The same link again (its token was not redeemed), confirmed: authenticated.
    scenario(["@ok", "123456"])
    code, results, _ = response(c, call(c, "ProcessOutOfBand", "sssa{sv}", "", "link", link, {})[0])
    assert code == 0 and results["operation"] == "Auth", results
    assert server.registrations()[0]["counter"] == 1
    # The facet is the caller's, not the payload's server: a server that trusts only its own origin (what
    # `tokenbridge oob` would use) refuses this caller, before any PIN.
    own = rps()
    scenario(["@ok", "123456"])
    code, results, _ = response(c, call(c, "ProcessOutOfBand", "sssa{sv}", "", "qr",
                                        qr(payload(own, "Reg", username="carol")), {})[0])
    assert code == 2 and results["errorCode"] == 7, results
    assert own.registrations() == []
    # A kind the API does not know is refused at the call.
    with pytest.raises(DBusErrorResponse) as e:
        call(c, "ProcessOutOfBand", "sssa{sv}", "", "fax", "x", {})
    assert e.value.name == NAME + ".Error.InvalidArgs" and e.value.data[0].startswith("6: ")


def test_a_card_pulled_mid_operation_answers_and_leaves_nothing(card, bus, rps, scenario, tmp_path):
    server = rps("--facet", MY_FACET)
    b = bus()
    c = b.connect()
    gate = tmp_path / "go"
    scenario([f"@wait:{gate}:123456", "123456"])
    path = process(c, server.request("Reg", username="alice")["uafRequest"])
    wait_until(lambda: "GETPIN" in pinentry_log(tmp_path), "the PIN dialog")
    card.remove()  # pulled while the dialog is up; the PIN comes after
    gate.touch()
    code, results, _ = response(c, path)
    assert code == 2 and results["exitStatus"] == 10 and results["errorCode"] == 255, results
    assert "removed" in results["error"], results
    rows = subprocess.run([TOKENBRIDGE, "authenticators", "--all", "--json"], capture_output=True, text=True,
                          env=dict(os.environ, **b.env), timeout=60)
    assert json.loads(rows.stdout) == [] and server.registrations() == []
    # Back in: the next request registers.
    card.proc.send_signal(signal.SIGUSR2)
    wait_until(lambda: unwrap(call(c, "ListTokens", "a{sv}", {})[0]) != [], "the card back")
    code, results, _ = response(c, process(c, server.request("Reg", username="alice")["uafRequest"]))
    assert code == 0, results


PCSCD_RESTART = r"""
import os, subprocess, sys, time
from jeepney import DBusAddress, new_method_call
from jeepney.io.blocking import open_dbus_connection
run = os.environ["TB_RUN_DIR"]
daemon = subprocess.Popen(["dbus-daemon", "--session", "--print-address", "--nofork"], stdout=subprocess.PIPE,
                          text=True)
address = daemon.stdout.readline().strip()
card = subprocess.Popen([os.environ["VT"], "piv", "--state", run + "/card.json", "--serial", "7700002"],
                        stderr=subprocess.DEVNULL)
serve = subprocess.Popen([os.environ["TB"], "serve", "--address", address, "--idle-timeout", "0"],
                         stderr=subprocess.DEVNULL)
new = None
try:
    c = open_dbus_connection(bus=address)
    a = DBusAddress("/org/tokenbridge/TokenBridge1", bus_name="org.tokenbridge.TokenBridge1",
                    interface="org.tokenbridge.TokenBridge1")

    def tokens():
        r = c.send_and_get_reply(new_method_call(a, "ListTokens", "a{sv}", ({},)), timeout=30)
        if r.header.message_type.name == "error":
            return "error " + r.header.fields[4]
        return [t["token"][1] for t in r.body[0]]

    def until(want):
        for _ in range(100):
            try:
                got = tokens()
            except Exception as e:  # the service not on the bus yet
                got = repr(e)
            if got == want:
                return got
            time.sleep(0.1)
        return got

    print("before:", until(["piv-7700002"]), flush=True)
    pcscd = int(os.environ["TB_PCSCD_PID"])
    os.kill(pcscd, 15)
    while os.path.exists(f"/proc/{pcscd}"):
        time.sleep(0.05)
    print("without pcscd:", tokens(), flush=True)
    new = subprocess.Popen(["pcscd", "-f", "-c", run + "/reader.conf"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    print("after:", until(["piv-7700002"]), flush=True)
    print("service alive:", serve.poll() is None, flush=True)
finally:
    for p in (serve, card, new, daemon):
        if p and p.poll() is None:
            p.terminate()
            p.wait()
"""


def test_the_service_survives_a_pcscd_restart(tmp_path):
    r = subprocess.run([str(ROOT / "Tools" / "with-pcscd"), "--", sys.executable, "-c", PCSCD_RESTART],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, TB=TOKENBRIDGE, VT=VIRTUAL_TOKEN))
    out = r.stdout + r.stderr
    assert "before: ['piv-7700002']" in out, out
    assert "without pcscd: []" in out or "without pcscd: error" in out, out
    assert "after: ['piv-7700002']" in out and "service alive: True" in out, out


class Notifications:
    """A desktop notification daemon on the private bus (org.freedesktop.Notifications): records each Notify."""

    def __init__(self, bus):
        import threading
        self.conn = bus.connect()
        reply = self.conn.send_and_get_reply(message_bus.RequestName("org.freedesktop.Notifications"))
        assert reply.body[0] == 1, reply.body  # primary owner
        self.seen = []
        self.stopping = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        from jeepney import new_method_return
        while not self.stopping:
            try:
                msg = self.conn.receive(timeout=0.2)
            except TimeoutError:
                continue
            except Exception:
                return
            if msg.header.fields.get(jeepney.HeaderFields.member) == "Notify":
                self.seen.append((msg.body[3], msg.body[4]))  # summary, body
                self.conn.send(new_method_return(msg, "u", (len(self.seen),)))

    def stop(self):
        self.stopping = True
        self.thread.join(timeout=5)
        self.conn.close()


def test_touch_cue_and_result_are_desktop_notifications(bus, rps, scenario, tmp_path):
    from fido2_conn import Key
    key = Key(tmp_path, "--presence", "wait")
    try:
        env = {"TOKENBRIDGE_VIRTUAL_FIDO": key.sock}
        b = bus(env)
        r = subprocess.run([TOKENBRIDGE, "pin", "set", "--pin-fd", "0"], input="123456\n", capture_output=True,
                           text=True, env=dict(os.environ, **b.env), timeout=60)
        assert r.returncode == 0, r.stderr
        notes = Notifications(b)
        server = rps("--facet", MY_FACET)
        c = b.connect()
        scenario(["123456"])
        path = process(c, server.request("Reg", username="alice")["uafRequest"])
        # The key waits for a touch (KEEPALIVE UP_NEEDED): the cue is a notification; each touch is SIGUSR2.
        for n in (1, 2):  # makeCredential, then getAssertion for the hmac-secret output
            wait_until(lambda: sum(s == "Touch your key" for s, _ in notes.seen) >= n, f"touch cue {n}")
            key.proc.send_signal(signal.SIGUSR2)
        code, results, _ = response(c, path)
        assert code == 0, results
        wait_until(lambda: any(s == "TokenBridge" for s, _ in notes.seen), "the result notification")
        touch = [body for s, body in notes.seen if s == "Touch your key"]
        assert touch[0].startswith("Touch your key (fido2-") and MY_FACET in touch[0], notes.seen
        assert ("TokenBridge", f"Done for {MY_FACET}.") in notes.seen
        # A failure is one too: the user cancels the PIN dialog.
        scenario(["@cancel"])
        code, results, _ = response(c, process(c, server.request("Reg", username="bob")["uafRequest"]))
        assert code == 1 and results["errorCode"] == 3, results
        wait_until(lambda: any(s == "TokenBridge: failed" for s, _ in notes.seen), "the failure notification")
        notes.stop()
    finally:
        key.proc.terminate()
        key.proc.wait(timeout=10)


def test_several_tokens_are_offered_in_pinentry_one_by_one(card, bus, rps, scenario, tmp_path):
    from fido2_conn import Key
    key = Key(tmp_path)
    try:
        env = {"TOKENBRIDGE_VIRTUAL_FIDO": key.sock}
        b = bus(env)
        r = subprocess.run([TOKENBRIDGE, "pin", "set", "--token", "fido2-fido-sock", "--pin-fd", "0"],
                           input="123456\n", capture_output=True, text=True, env=dict(os.environ, **b.env), timeout=60)
        assert r.returncode == 0, r.stderr
        server = rps("--facet", MY_FACET)
        c = b.connect()
        # No token option, two tokens: each usable one is offered in turn ("Register with …?"): Next on the first,
        # Use this on the second, then its PIN.
        scenario(["@cancel", "@ok", "123456"])
        code, results, _ = response(c, process(c, server.request("Reg", username="alice")["uafRequest"]))
        assert code == 0, results
        log = pinentry_log(tmp_path)
        offered = re.findall(r"SETDESC Register with [^%]*\((piv-[^)]+|fido2-[^)]+)\)\?", log)
        assert len(offered) == 2 and offered[0] != offered[1], log
        chosen = offered[1]
        assert server.respond("Reg", json.loads(results["message"])["uafProtocolMessage"]) == 1200
        [reg] = server.registrations()
        assert reg["aaid"] == {"piv": "7B1D#0001", "fido2": "7B1D#0002"}[chosen.split("-")[0]], (chosen, reg)
        # Cancel on every offer: nothing is done, the caller hears "cancelled".
        scenario(["@cancel", "@cancel"])
        code, results, _ = response(c, process(c, server.request("Reg", username="bob")["uafRequest"]))
        assert code == 1 and results["errorCode"] == 3, results
        assert len(server.registrations()) == 1
    finally:
        key.proc.terminate()
        key.proc.wait(timeout=10)


def test_close_while_a_fido2_key_waits_for_a_touch_cancels_on_the_key(bus, rps, scenario, tmp_path):
    from fido2_conn import Key
    key = Key(tmp_path, "--presence", "wait")
    try:
        b = bus({"TOKENBRIDGE_VIRTUAL_FIDO": key.sock})
        r = subprocess.run([TOKENBRIDGE, "pin", "set", "--pin-fd", "0"], input="123456\n", capture_output=True,
                           text=True, env=dict(os.environ, **b.env), timeout=60)
        assert r.returncode == 0, r.stderr
        notes = Notifications(b)
        server = rps("--facet", MY_FACET)
        c = b.connect()
        scenario(["123456", "123456"])
        path = process(c, server.request("Reg", username="alice")["uafRequest"])
        wait_until(lambda: any(s == "Touch your key" for s, _ in notes.seen), "the touch cue")
        start = time.monotonic()
        c.send_and_get_reply(new_method_call(DBusAddress(path, bus_name=NAME, interface=REQUEST_IFACE), "Close"))
        code, results, _ = response(c, path, timeout=10)
        # The key was told (CTAPHID_CANCEL): the request ends at once, not at the key's touch timeout.
        assert code == 1 and results["errorCode"] == 3, results
        assert time.monotonic() - start < 3
        assert server.registrations() == []
        # The key is free: the next registration, touched each time the key asks (the touch cue), goes through.
        path = process(c, server.request("Reg", username="alice")["uafRequest"])
        for n in range(2):
            cues = lambda: sum(s == "Touch your key" for s, _ in notes.seen)  # noqa: E731
            wait_until(lambda: cues() >= 2 + n, f"touch cue {n + 1} of the second registration")
            key.proc.send_signal(signal.SIGUSR2)
        code, results, _ = response(c, path)
        assert code == 0, results
        notes.stop()
    finally:
        key.proc.terminate()
        key.proc.wait(timeout=10)


def test_hostile_messages_get_the_bounds_of_uaf_process(card, bus, rps, scenario, tmp_path):
    server = rps("--facet", MY_FACET)
    c = bus().connect()
    big = json.dumps({"uafProtocolMessage": "[" + " " * (1 << 20) + "]"})  # over uaf process's 1 MiB
    assert call(c, "CheckPolicy", "sa{sv}", big, {}) == (6,)
    code, results, _ = response(c, process(c, big))
    assert code == 2 and results["errorCode"] == 6, results
    # Deeply nested JSON, a wrong option type, an unknown option value: answers, never a crash.
    assert call(c, "CheckPolicy", "sa{sv}", "[" * 100000, {}) == (6,)
    with pytest.raises(DBusErrorResponse) as e:
        call(c, "CheckPolicy", "sa{sv}", "[]", {"token": ("u", 7)})
    assert e.value.name == NAME + ".Error.InvalidArgs"
    assert pinentry_log(tmp_path) == ""
    # Still serving.
    assert unwrap(call(c, "Discover")[0])["clientVendor"] == "TokenBridge"
