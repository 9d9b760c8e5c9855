"""The desktop service (docs/dbus-api.md) under many callers, cancellations and hostile callers: listings and policy
checks answer while another caller's operation holds a token; a flood of calls from one caller is bounded (Busy)
and leaves the others, and pcscd, served; a caller whose root holds a FIFO at /.flatpak-info does not stop the bus
thread; idle exit answers every call already sent. Same private bus and clients as test_dbus_service.py."""
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT, TOKENBRIDGE, wait_until
from test_dbus_service import (MY_FACET, NAME, PATH, REQUEST_IFACE, SERVICE, Bus, bus, call, has_owner,  # noqa: F401
                               home, pinentry_log, process, response, scenario, unwrap)
from test_uaf import rp as rps  # noqa: F401

from jeepney import DBusAddress, HeaderFields, MessageType, new_method_call  # noqa: E402
from jeepney.wrappers import DBusErrorResponse  # noqa: E402


def bench_module():
    """Tools/bench/service_load.py: its load and its count of the service's PC/SC contexts."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("service_load", ROOT / "Tools" / "bench" / "service_load.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = bench_module()


class SessionLimitsBus(Bus):
    """A private bus with the session bus's limits (Debian's session.conf: 50000 pending replies per connection,
    where a bare configuration allows 128), so one caller can have hundreds of calls in flight, as on a desktop."""

    def __init__(self, tmp_path, env):
        super().__init__(tmp_path, env)
        self.daemon.terminate()
        self.daemon.wait(timeout=10)
        conf = tmp_path / "bus.conf"
        conf.write_text(conf.read_text().replace(
            "<auth>EXTERNAL</auth>",
            '<auth>EXTERNAL</auth>\n  <limit name="max_replies_per_connection">50000</limit>'))
        self.daemon = subprocess.Popen(["dbus-daemon", f"--config-file={conf}", "--print-address", "--nofork"],
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                       env=dict(os.environ, **env))
        self.address = self.daemon.stdout.readline().strip()
        assert self.address.startswith("unix:"), self.address


@pytest.fixture
def session_bus(tmp_path, home, scenario):  # noqa: F811
    started = []

    def make(extra_env=None):
        b = SessionLimitsBus(tmp_path, dict(home, **(extra_env or {})))
        started.append(b)
        b.start()
        return b

    yield make
    for b in started:
        b.stop()


def requests_seen(d):
    p = d / "count"
    return int(p.read_text()) if p.exists() else 0


def threads(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(l for l in f if l.startswith("Threads:")).split()[1])


def test_check_policy_answers_while_another_callers_pin_dialog_is_up(cards, bus, rps, scenario, tmp_path):
    counter = tmp_path / "requests"
    counter.mkdir()
    cards(args=("--pause-dir", str(counter)))
    server = rps("--facet", MY_FACET)
    b = bus()
    scenario(["@hang"])
    a = b.connect()
    path = process(a, server.request("Reg", username="alice")["uafRequest"])
    wait_until(lambda: "GETPIN" in pinentry_log(tmp_path), "A's PIN dialog", timeout=30)
    before = requests_seen(counter)
    c = b.connect()
    # Another caller's CheckPolicy answers from the tokens the running registration found, without the card.
    reg = server.request("Reg", username="bob")["uafRequest"]
    assert call(c, "CheckPolicy", "sa{sv}", reg, {}, timeout=10) == (0,)
    auth = server.request("Auth")["uafRequest"]
    assert call(c, "CheckPolicy", "sa{sv}", auth, {}, timeout=10) == (5,)  # no registration here yet
    [listed] = unwrap(call(c, "ListTokens", "a{sv}", {}, timeout=10)[0])
    assert not listed["usable"] and listed["reason"].startswith("busy")
    assert len(unwrap(call(c, "Discover", timeout=10)[0])["availableAuthenticators"]) == 1
    assert requests_seen(counter) == before
    a.send_and_get_reply(new_method_call(DBusAddress(path, bus_name=NAME, interface=REQUEST_IFACE), "Close"))
    code, results, _ = response(a, path, timeout=30)
    assert code == 1 and results["errorCode"] == 3, results


def flood(conn, n):
    """Sends n Discover and ListTokens calls without waiting; returns their serials."""
    serials = []
    for i in range(n):
        m = new_method_call(SERVICE, "Discover") if i % 2 else new_method_call(SERVICE, "ListTokens", "a{sv}", ({},))
        serials.append(100000 + i)
        conn.send(m, serial=serials[-1])
    return serials


def collect(conn, serials, timeout=120):
    """The replies to `serials`: (ok, busy, other errors)."""
    want = set(serials)
    ok = busy = 0
    other = []
    end = time.monotonic() + timeout
    while want and time.monotonic() < end:
        msg = conn.receive(timeout=max(0.1, end - time.monotonic()))
        serial = msg.header.fields.get(HeaderFields.reply_serial)
        if serial not in want:
            continue
        want.discard(serial)
        if msg.header.message_type == MessageType.error:
            name = msg.header.fields.get(HeaderFields.error_name)
            text = msg.body[0] if msg.body else ""
            if name == NAME + ".Error.Busy" and text.startswith("15: "):
                busy += 1
            else:
                other.append((name, text))
        else:
            ok += 1
    assert not want, f"{len(want)} calls got no answer"
    return ok, busy, other


def test_a_flood_of_calls_from_one_caller_is_bounded_and_the_others_are_served(card, session_bus, tmp_path):
    b = session_bus()
    pid = b.service.pid
    flooder = b.connect()
    serials = flood(flooder, 250)
    peak = 0
    other = b.connect()
    for _ in range(3):
        [listed] = unwrap(call(other, "ListTokens", "a{sv}", {}, timeout=60)[0])
        assert listed["token"] == card.id
        r = subprocess.run([TOKENBRIDGE, "tokens"], capture_output=True, text=True, env=dict(os.environ, **b.env),
                           timeout=60)
        assert r.returncode == 0 and card.id in r.stdout, r.stderr
        peak = max(peak, BENCH.pcsc_contexts(pid))
    ok, busy, errors = collect(flooder, serials)
    assert errors == []
    assert ok + busy == 250 and ok >= 16 and busy > 0, (ok, busy)
    # PC/SC contexts stay within the pool's two workers whatever the flood.
    assert peak <= 2, peak
    assert threads(pid) <= 12, threads(pid)


def test_a_caller_with_a_fifo_for_flatpak_info_does_not_stop_the_service(card, bus, tmp_path):
    b = bus()
    root = tmp_path / "root"
    root.mkdir()
    os.mkfifo(root / ".flatpak-info")
    # The caller connects, then moves into a root of its own whose /.flatpak-info is a FIFO (as root: chroot; else
    # an unprivileged user and mount namespace first), then calls.
    client = tmp_path / "fifo_client.py"
    client.write_text(textwrap.dedent(f"""\
        import os, sys
        from jeepney import DBusAddress, HeaderFields, new_method_call
        from jeepney.io.blocking import open_dbus_connection
        c = open_dbus_connection(bus={b.address!r})
        a = DBusAddress({PATH!r}, bus_name={NAME!r}, interface={NAME!r})
        m = new_method_call(a, "CheckPolicy", "sa{{sv}}", ("not json", {{}}))
        os.chroot({str(root)!r})
        os.chdir("/")
        c.send(m, serial=77)
        print("sent", flush=True)
        while True:
            r = c.receive(timeout=60)
            if r.header.fields.get(HeaderFields.reply_serial) == 77:
                break
        print(r.header.message_type.name, r.body, flush=True)
        """))
    wrap = [] if os.getuid() == 0 else ["unshare", "-r", "-m"]
    p = subprocess.Popen([*wrap, sys.executable, str(client)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "sent"
        c = b.connect()
        # The others are answered while (and after) the service looks at that caller.
        for _ in range(3):
            assert unwrap(call(c, "Discover", timeout=15)[0])["clientVendor"] == "TokenBridge"
        # Its answer is read through the same buffered reader as "sent": communicate() reads the pipe itself, and a
        # line the reader had already taken with "sent" (both written before the test read the first) was lost.
        out = p.stdout.readline().strip()
        p.wait(timeout=60)
        err = p.stderr.read()
        # That caller is its executable (a FIFO is no Flatpak identity): its CheckPolicy is answered.
        assert p.returncode == 0, err
        assert out == "method_return (6,)", out
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_idle_exit_answers_every_call_already_sent(bus, tmp_path):
    # A service that idles out after 0.2 s, started by the bus for each call that finds no owner; Peer.Ping (which
    # sd-bus answers itself) never resets its idle timer, so it exits again and again while calls keep coming.
    b = bus(start=False)
    starts = tmp_path / "starts"
    serve = tmp_path / "serve.sh"
    serve.write_text(f"#!/bin/sh\necho start >> '{starts}'\nexec '{TOKENBRIDGE}' serve --idle-timeout 0.2\n")
    serve.chmod(0o755)
    (b.services / f"{NAME}.service").write_text(f"[D-BUS Service]\nName={NAME}\nExec={serve}\n")
    import threading
    errors, answered = [], [0]
    lock = threading.Lock()

    def lives():
        return len(starts.read_text().split()) if starts.exists() else 0

    def caller():
        # Calls until the service has started (and so idled out) five times, each waiting for its answer.
        c = b.connect()
        ping = new_method_call(DBusAddress(PATH, bus_name=NAME, interface="org.freedesktop.DBus.Peer"), "Ping")
        for i in range(100000):
            if i % 50 == 0 and lives() >= 40:
                break
            r = c.send_and_get_reply(ping, timeout=30)
            with lock:
                if r.header.message_type == MessageType.error:
                    errors.append(r.header.fields.get(HeaderFields.error_name))
                else:
                    answered[0] += 1
        c.close()

    workers = [threading.Thread(target=caller) for _ in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=600)
    assert errors == [], (errors[:5], len(errors), answered[0])
    # The calls spanned several lives of the service (else the test proved nothing).
    assert lives() >= 40


def test_a_registration_closed_while_the_card_works_is_not_kept(cards, bus, rps, scenario, tmp_path):
    hook = tmp_path / "requests"
    hook.mkdir()
    cards(args=("--pause-dir", str(hook)))
    server = rps("--facet", MY_FACET)
    b = bus()
    c = b.connect()
    gate = tmp_path / "gate"
    scenario([f"@wait:{gate}:123456", "123456"])
    path = process(c, server.request("Reg", username="alice")["uafRequest"])
    wait_until(lambda: "GETPIN" in pinentry_log(tmp_path), "the PIN dialog", timeout=30)
    # The card stops after the second request it gets once the PIN is typed (VERIFY, then the key's generation):
    # the PIN was given and the card works when the caller closes the request.
    (hook / ".arm").write_text("2 after\n")
    os.rename(hook / ".arm", hook / "arm")
    gate.write_text("")
    wait_until(lambda: (hook / "paused").exists(), "the card at work", timeout=30)
    c.send_and_get_reply(new_method_call(DBusAddress(path, bus_name=NAME, interface=REQUEST_IFACE), "Close"))
    os.unlink(hook / "paused")
    code, results, _ = response(c, path, timeout=60)
    assert code == 1 and results["errorCode"] == 3, results
    env = dict(os.environ, **b.env)

    def local():
        r = subprocess.run([TOKENBRIDGE, "authenticators", "--all", "--json"], capture_output=True, text=True,
                           env=env, timeout=60)
        assert r.returncode == 0, r.stderr
        # Registered and pending records (an abandoned slot stays ours, with no key: not a registration).
        return [row["keyID"] for row in __import__("json").loads(r.stdout) if row["state"] != "abandoned"]

    # Nothing is registered locally that the server lacks.
    assert server.registrations() == [] and local() == []
    # And the next registration works.
    code, results, _ = response(c, process(c, server.request("Reg", username="alice")["uafRequest"]))
    assert code == 0, results
    assert len(local()) == 1


def test_a_pcscd_that_stops_after_answering_once_does_not_hang_the_service(card, bus, rps, tmp_path):
    server = rps("--facet", MY_FACET)
    b = bus(start=False)
    # A short call timeout (the default is 20 s, under D-Bus's 25 s) and idle timeout, for the test's sake.
    b.service = subprocess.Popen([TOKENBRIDGE, "serve", "--address", b.address, "--idle-timeout", "2",
                                  "--call-timeout", "2"], env=dict(os.environ, **b.env), stderr=open(b.log, "a"),
                                 stdin=subprocess.DEVNULL, start_new_session=True)
    c = b.connect()
    # (Waits, not time bounds: 10 s ran out in a cold run beside the package's release build and the lab's QEMU.)
    wait_until(lambda: has_owner(c, NAME), "the service on the bus", timeout=30)
    assert len(unwrap(call(c, "Discover", timeout=30)[0])["availableAuthenticators"]) == 1  # pcscd answered once
    reg = server.request("Reg", username="alice")["uafRequest"]
    pcscd = int(os.environ["TB_PCSCD_PID"])
    os.kill(pcscd, signal.SIGSTOP)
    try:
        for method, sig, args in (("Discover", "", ()), ("ListTokens", "a{sv}", ({},))):
            with pytest.raises(DBusErrorResponse) as e:
                call(c, method, sig, *args, timeout=30)
            assert e.value.name == NAME + ".Error.Failed", e.value
            assert e.value.data[0].startswith("5: The PC/SC service (pcscd) does not answer"), e.value.data
        # CheckPolicy answers a code, as always: no suitable authenticator.
        assert call(c, "CheckPolicy", "sa{sv}", reg, {}, timeout=30) == (5,)
        # Nothing is left open: the service idles out although its workers are stuck in PC/SC.
        b.service.wait(timeout=60)
        assert b.service.returncode == 0
    finally:
        os.kill(pcscd, signal.SIGCONT)


def test_the_load_bench_stays_within_its_bounds(card, session_bus, rps, tmp_path):
    # Tools/bench/service_load's load, small: every method from 8 callers at once. Bounds only, no timing: no error
    # but the documented Busy, and the service's PC/SC contexts within its two workers and the one operation.
    server = rps("--facet", MY_FACET)
    b = session_bus()  # no registration here: each ProcessUAFOperation ends with errorCode 5 before any dialog
    results, sampler = BENCH.load(b.address, b.service.pid, 8, 2, lambda: (
        server.request("Reg", username="alice")["uafRequest"], server.request("Auth")["uafRequest"]))
    for method, r in results.items():
        assert r["errors"] == [], (method, r["errors"][:3])
        assert len(r["latency"]) + r["busy"] == 16, (method, r)
    assert len(results["Discover"]["latency"]) == 16 and len(results["CheckPolicy"]["latency"]) == 16
    assert sampler.contexts <= 3, sampler.contexts
