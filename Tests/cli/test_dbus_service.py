"""tokenbridge serve (docs/dbus-api.md) on a private session bus: each test starts its own dbus-daemon (no systemd,
no session bus needed) and stops it by pid; the clients are jeepney (this process, and child processes where a
client must die), busctl and gdbus. The RP is Tools/rp; PINs come from a scripted pinentry (never over D-Bus)."""
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

from conftest import ROOT, TOKENBRIDGE, VIRTUAL_TOKEN, wait_until
from implementations import UAFToken
from test_uaf import rp as rps  # noqa: F401 (fixture: the relying parties a test starts)
from uaf_shapes import PIV_AUTHENTICATOR, check_discovery_data

jeepney = pytest.importorskip("jeepney", reason="jeepney (PyPI) is the D-Bus client of these tests: Tools/setup")
from jeepney import DBusAddress, MatchRule, message_bus, new_method_call  # noqa: E402
from jeepney.io.blocking import open_dbus_connection  # noqa: E402
from jeepney.wrappers import DBusErrorResponse  # noqa: E402

SCRIPTED = str(ROOT / "Tests" / "cli" / "scripted_pinentry.py")
NAME = "org.tokenbridge.TokenBridge1"
PATH = "/org/tokenbridge/TokenBridge1"
SERVICE = DBusAddress(PATH, bus_name=NAME, interface=NAME)
REQUEST_IFACE = NAME + ".Request"
# This process's facet ID, as the service derives it (docs/dbus-api.md: unix:exe:<executable>).
MY_FACET = "unix:exe:" + os.readlink("/proc/self/exe")

pytestmark = pytest.mark.skipif(shutil.which("dbus-daemon") is None, reason="dbus-daemon (Debian dbus-daemon) missing")


class Bus:
    """A private dbus-daemon (session type) with its own service directory, and the service on it."""

    def __init__(self, tmp_path, env):
        self.tmp = tmp_path
        self.env = env
        self.services = tmp_path / "services"
        self.services.mkdir(exist_ok=True)
        conf = tmp_path / "bus.conf"
        conf.write_text(textwrap.dedent(f"""\
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>session</type>
              <listen>unix:dir={tmp_path}</listen>
              <servicedir>{self.services}</servicedir>
              <auth>EXTERNAL</auth>
              <policy context="default">
                <allow send_destination="*" eavesdrop="true"/>
                <allow eavesdrop="true"/>
                <allow own="*"/>
              </policy>
            </busconfig>
            """))
        self.daemon = subprocess.Popen(["dbus-daemon", f"--config-file={conf}", "--print-address", "--nofork"],
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                       env=dict(os.environ, **env))
        self.address = self.daemon.stdout.readline().strip()
        assert self.address.startswith("unix:"), self.address
        self.service = None
        self.log = tmp_path / "serve.log"

    def start(self, idle=60):
        self.service = subprocess.Popen([TOKENBRIDGE, "serve", "--address", self.address, "--idle-timeout", str(idle)],
                                        env=dict(os.environ, **self.env), stderr=open(self.log, "a"),
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        c = self.connect()
        wait_until(lambda: has_owner(c, NAME), "the service on the bus")
        c.close()

    def connect(self):
        return open_dbus_connection(bus=self.address)

    def stop(self):
        if self.service and self.service.poll() is None:
            self.service.terminate()
            self.service.wait(timeout=10)
        self.daemon.terminate()
        self.daemon.wait(timeout=10)


def has_owner(conn, name):
    return conn.send_and_get_reply(message_bus.NameHasOwner(name)).body[0]


def call(conn, method, sig="", *args, timeout=30):
    r = conn.send_and_get_reply(new_method_call(SERVICE, method, sig, args), timeout=timeout)
    if r.header.message_type.name == "error":
        raise DBusErrorResponse(r)
    return r.body


def unwrap(v):
    """jeepney's variants are (signature, value); dictionaries of them become plain values."""
    if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str):
        return unwrap(v[1])
    if isinstance(v, dict):
        return {k: unwrap(x) for k, x in v.items()}
    if isinstance(v, list):
        return [unwrap(x) for x in v]
    return v


def process(conn, message, options=None, channel_bindings=""):
    """ProcessUAFOperation with the match rule added first (docs/dbus-api.md); returns the request path."""
    rule = MatchRule(type="signal", interface=REQUEST_IFACE, member="Response")
    conn.send_and_get_reply(message_bus.AddMatch(rule))
    return call(conn, "ProcessUAFOperation", "sssa{sv}", "", message, channel_bindings, options or {})[0]


def response(conn, path, timeout=60):
    rule = MatchRule(type="signal", interface=REQUEST_IFACE, member="Response", path=path)
    with conn.filter(rule) as q:
        msg = conn.recv_until_filtered(q, timeout=timeout)
    code, results = msg.body
    return code, unwrap(results), msg


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "pinentry.json"

    def write(answers):
        path.write_text(json.dumps({"answers": answers}))
        for suffix in (".pos", ".log"):
            p = tmp_path / ("pinentry.json" + suffix)
            if p.exists():
                p.unlink()
        return path

    write([])
    return write


@pytest.fixture
def home(tmp_path):
    (tmp_path / "config" / "tokenbridge").mkdir(parents=True)
    return {"XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "PINENTRY_PROGRAM": SCRIPTED, "SCRIPTED_PINENTRY_SCENARIO": str(tmp_path / "pinentry.json")}


@pytest.fixture
def bus(tmp_path, home, scenario):
    started = []

    def make(extra_env=None, start=True, idle=60):
        b = Bus(tmp_path, dict(home, **(extra_env or {})))
        started.append(b)
        if start:
            b.start(idle=idle)
        return b

    yield make
    for b in started:
        b.stop()


def pinentry_log(tmp_path):
    p = tmp_path / "pinentry.json.log"
    return p.read_text() if p.exists() else ""


def pinentry_pids(tmp_path):
    p = tmp_path / "pinentry.json.pids"
    return [int(x) for x in p.read_text().split()] if p.exists() else []


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purpose.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_discover_and_list_tokens(card, bus, tmp_path):
    b = bus()
    c = b.connect()
    d = unwrap(call(c, "Discover")[0])
    check_discovery_data(d)
    listed = unwrap(call(c, "ListTokens", "a{sv}", {})[0])
    assert [(t["token"], t["kind"], t["aaid"], t["usable"]) for t in listed] == [(card.id, "piv", "7B1D#0001", True)]
    assert [(a["aaid"], a["title"]) for a in d["availableAuthenticators"]] == \
        [("7B1D#0001", "PIV smart card: " + listed[0]["name"])]
    [a] = d["availableAuthenticators"]
    assert a.pop("icon") and a == PIV_AUTHENTICATOR | {"title": "PIV smart card: " + listed[0]["name"]}
    assert unwrap(call(c, "ListTokens", "a{sv}", {"token": ("s", card.id)})[0])[0]["kind"] == "piv"
    # busctl and gdbus, as a desktop user would call it.
    env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=b.address)
    r = subprocess.run(["busctl", "--user", "call", NAME, PATH, NAME, "Discover"], capture_output=True, text=True,
                       env=env, timeout=30)
    assert r.returncode == 0 and '"availableAuthenticators"' in r.stdout and '"7B1D#0001"' in r.stdout, r.stderr
    if shutil.which("gdbus"):
        r = subprocess.run(["gdbus", "call", "--session", "-d", NAME, "-o", PATH, "-m", NAME + ".ListTokens", "{}"],
                           capture_output=True, text=True, env=env, timeout=30)
        assert r.returncode == 0 and card.id in r.stdout, r.stderr
    assert pinentry_log(tmp_path) == ""


def test_check_policy_never_prompts(card, bus, rps, tmp_path):
    server = rps("--facet", MY_FACET)
    untrusting = rps("--facet", "unix:exe:/usr/bin/someone-else")
    c = bus().connect()
    reg = server.request("Reg", username="alice")["uafRequest"]
    assert call(c, "CheckPolicy", "sa{sv}", json.dumps({"uafProtocolMessage": reg}), {}) == (0,)
    assert call(c, "CheckPolicy", "sa{sv}", reg, {}) == (0,)  # the bare array too
    assert call(c, "CheckPolicy", "sa{sv}", untrusting.request("Reg", username="a")["uafRequest"], {}) == (7,)
    assert call(c, "CheckPolicy", "sa{sv}", "not json", {}) == (6,)
    # Nothing registered: an authentication has no suitable authenticator.
    assert call(c, "CheckPolicy", "sa{sv}", server.request("Auth")["uafRequest"], {}) == (5,)
    unsupported = reg.replace('"minor": 1', '"minor": 7').replace('"minor":1', '"minor":7')
    assert call(c, "CheckPolicy", "sa{sv}", unsupported, {}) in ((4,), (6,))
    assert pinentry_log(tmp_path) == "" and pinentry_pids(tmp_path) == []
    assert server.registrations() == []


@pytest.mark.parametrize("kind", ["piv-virtual", "fido2-virtual"])
def test_register_authenticate_deregister(kind, request, cards, monkeypatch, bus, rps, scenario, tmp_path):
    token = UAFToken(kind, request, tmp_path, cards, monkeypatch)
    server = rps("--facet", MY_FACET)
    b = bus(token.env)
    c = b.connect()
    watcher = b.connect()  # another client listening for every Response: unicast signals must not reach it
    watcher.send_and_get_reply(message_bus.AddMatch(MatchRule(type="signal", interface=REQUEST_IFACE)))

    scenario(["123456"])
    path = process(c, server.request("Reg", username="alice")["uafRequest"])
    assert path.startswith(PATH + "/request/")
    code, results, msg = response(c, path)
    assert code == 0 and results["errorCode"] == 0, results
    assert msg.header.fields[jeepney.HeaderFields.destination] == c.unique_name
    reg_message = json.loads(results["message"])["uafProtocolMessage"]
    assert server.respond("Reg", reg_message) == 1200
    assert [x["aaid"] for x in server.registrations()] == [token.aaid]
    log = pinentry_log(tmp_path)
    # The dialog names the app (this program's facet) and the server.
    assert f"App: {MY_FACET}" in log and f"Server: {server.url}" in log

    scenario(["123456"])
    path = process(c, server.request("Auth", username="alice", transaction="Pay 10 CHF\x1b[2J to Bob")["uafRequest"])
    code, results, _ = response(c, path)
    assert code == 0, results
    assert server.respond("Auth", json.loads(results["message"])["uafProtocolMessage"]) == 1200
    log = pinentry_log(tmp_path)
    assert "Confirm: Pay 10 CHF\\u{1B}[2J to Bob" in log  # the server's text escaped as the CLI shows it

    scenario([])
    path = process(c, server.request("Dereg", username="alice")["uafRequest"])
    code, results, _ = response(c, path)
    assert code == 0 and json.loads(results["message"]) == {"uafProtocolMessage": ""}, results
    listed = subprocess.run([TOKENBRIDGE, "authenticators", "--json"], capture_output=True, text=True,
                            env=dict(os.environ, **b.env), timeout=60)
    assert json.loads(listed.stdout) == []

    with pytest.raises(TimeoutError):
        with watcher.filter(MatchRule(type="signal", interface=REQUEST_IFACE)) as q:
            watcher.recv_until_filtered(q, timeout=0.5)


def test_notify_uaf_result_abandons_a_refused_registration(card, bus, rps, scenario, tmp_path):
    server = rps("--facet", MY_FACET)
    b = bus()
    c = b.connect()
    scenario(["123456"])
    code, results, _ = response(c, process(c, server.request("Reg", username="alice")["uafRequest"]))
    assert code == 0, results
    env = dict(os.environ, **b.env)
    rows = lambda: json.loads(subprocess.run([TOKENBRIDGE, "authenticators", "--json"], capture_output=True,  # noqa
                                             text=True, env=env, timeout=60).stdout)
    assert len(rows()) == 1
    call(c, "NotifyUAFResult", "us", 1498, results["message"])
    assert rows() == []


def test_close_cancels_the_pinentry_dialog(card, bus, rps, scenario, tmp_path):
    server = rps("--facet", MY_FACET)
    c = bus().connect()
    scenario(["@hang"])
    path = process(c, server.request("Reg", username="alice")["uafRequest"])
    wait_until(lambda: "GETPIN" in pinentry_log(tmp_path), "the PIN dialog")
    [pid] = pinentry_pids(tmp_path)
    start = time.monotonic()
    c.send_and_get_reply(new_method_call(DBusAddress(path, bus_name=NAME, interface=REQUEST_IFACE), "Close"))
    code, results, _ = response(c, path, timeout=10)
    assert code == 1 and results["errorCode"] == 3, results
    assert time.monotonic() - start < 3
    wait_until(lambda: not alive(pid), "the pinentry stopped", timeout=5)
    assert server.registrations() == []


def test_two_clients_busy_and_a_killed_client_cancels(card, bus, rps, scenario, tmp_path):
    server = rps("--facet", MY_FACET)
    b = bus()
    scenario(["@hang", "123456"])
    # Client A in a process of its own: it asks, then is killed while the PIN dialog is up.
    client = tmp_path / "client.py"
    client.write_text(textwrap.dedent(f"""\
        import sys, time
        from jeepney import DBusAddress, new_method_call
        from jeepney.io.blocking import open_dbus_connection
        c = open_dbus_connection(bus={b.address!r})
        a = DBusAddress({PATH!r}, bus_name={NAME!r}, interface={NAME!r})
        r = c.send_and_get_reply(new_method_call(a, "ProcessUAFOperation", "sssa{{sv}}", ("", sys.argv[1], "", {{}})))
        print(r.body[0], flush=True)
        time.sleep(600)
        """))
    a = subprocess.Popen([sys.executable, str(client), server.request("Reg", username="alice")["uafRequest"]],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert a.stdout.readline().startswith(PATH + "/request/")
        wait_until(lambda: "GETPIN" in pinentry_log(tmp_path), "A's PIN dialog")
        [pid] = pinentry_pids(tmp_path)
        c = b.connect()
        with pytest.raises(DBusErrorResponse) as e:
            process(c, server.request("Reg", username="bob")["uafRequest"])
        assert e.value.name == NAME + ".Error.Busy" and e.value.data[0].startswith("15: ")
        # Discover and ListTokens still answer, ListTokens naming the token busy.
        [auth] = unwrap(call(c, "Discover")[0])["availableAuthenticators"]
        assert auth["aaid"] == "7B1D#0001"
        [listed] = unwrap(call(c, "ListTokens", "a{sv}", {})[0])
        assert not listed["usable"] and listed["reason"].startswith("busy")
    finally:
        a.kill()
        a.wait()
    wait_until(lambda: not alive(pid), "A's pinentry stopped after A was killed", timeout=5)
    # The token is free again: B's registration runs.
    path = None
    end = time.monotonic() + 10
    while path is None:
        try:
            path = process(c, server.request("Reg", username="bob")["uafRequest"])
        except DBusErrorResponse as err:
            assert err.name == NAME + ".Error.Busy" and time.monotonic() < end
            time.sleep(0.1)
    code, results, _ = response(c, path)
    assert code == 0, results


def test_a_claimed_flatpak_id_gets_no_facet_of_that_app(card, bus, rps, tmp_path):
    app = "flatpak:app-id:org.example.Bank"
    server = rps("--facet", app)
    c = bus().connect()
    reg = server.request("Reg", username="alice")["uafRequest"]
    claims = {"app_id": ("s", "org.example.Bank"), "facet_id": ("s", app), "facetID": ("s", app)}
    assert call(c, "CheckPolicy", "sa{sv}", reg, claims) == (7,)
    # An origin is only for the callers the configuration names.
    with pytest.raises(DBusErrorResponse) as e:
        call(c, "CheckPolicy", "sa{sv}", reg, {"origin": ("s", server.url)})
    assert e.value.name == NAME + ".Error.AccessDenied" and e.value.data[0].startswith("12: ")


def test_origin_from_a_named_caller(card, bus, rps, tmp_path, home):
    server = rps()  # trusts its own origin only
    (tmp_path / "config" / "tokenbridge" / "config.json").write_text(json.dumps({"serviceOriginCallers": [MY_FACET]}))
    c = bus().connect()
    reg = server.request("Reg", username="alice")["uafRequest"]
    assert call(c, "CheckPolicy", "sa{sv}", reg, {}) == (7,)
    assert call(c, "CheckPolicy", "sa{sv}", reg, {"origin": ("s", server.url)}) == (0,)
    with pytest.raises(DBusErrorResponse) as e:
        call(c, "CheckPolicy", "sa{sv}", reg, {"origin": ("s", server.url + "/path")})
    assert e.value.name == NAME + ".Error.InvalidArgs"


def test_activation_and_idle_exit(card, bus, tmp_path):
    b = bus(start=False)
    (b.services / f"{NAME}.service").write_text(
        f"[D-BUS Service]\nName={NAME}\nExec={TOKENBRIDGE} serve --idle-timeout 2\n")
    c = b.connect()
    assert not has_owner(c, NAME)
    d = unwrap(call(c, "Discover")[0])  # the bus starts the service for this call
    assert d["clientVendor"] == "TokenBridge"
    assert has_owner(c, NAME)
    start = time.monotonic()
    wait_until(lambda: not has_owner(c, NAME), "the idle service to exit", timeout=10)
    assert time.monotonic() - start >= 1.5


def test_packaged_service_files_name_the_binary():
    svc = (ROOT / "dbus" / f"{NAME}.service").read_text()
    assert f"Name={NAME}" in svc and "Exec=/usr/bin/tokenbridge serve" in svc
    assert "SystemdService=tokenbridge-serve.service" in svc
    unit = (ROOT / "dbus" / "tokenbridge-serve.service").read_text()
    assert "Type=dbus" in unit and f"BusName={NAME}" in unit and "ExecStart=/usr/bin/tokenbridge serve" in unit


def test_doctor_checks_the_activation_files(tmp_path):
    data, config = tmp_path / "data", tmp_path / "config"
    env = dict(os.environ, XDG_DATA_HOME=str(data), XDG_CONFIG_HOME=str(config))
    doctor = lambda: [l for l in subprocess.run([TOKENBRIDGE, "doctor"], capture_output=True, text=True, env=env,  # noqa
                                                timeout=60).stdout.splitlines() if "desktop service" in l]
    assert doctor()[0].startswith("ok   desktop service: not installed")
    services = data / "dbus-1" / "services"
    services.mkdir(parents=True)
    svc = (ROOT / "dbus" / f"{NAME}.service").read_text()
    (services / f"{NAME}.service").write_text(svc.replace("/usr/bin/tokenbridge", f'"{TOKENBRIDGE}"'))
    # The user unit it names is missing.
    assert doctor()[0].startswith("FAIL desktop service:") and "tokenbridge-serve.service" in doctor()[0]
    (config / "systemd" / "user").mkdir(parents=True)
    (config / "systemd" / "user" / "tokenbridge-serve.service").write_text("[Service]\n")
    assert doctor()[0].startswith("ok   desktop service:")
    (services / f"{NAME}.service").write_text(svc.replace("/usr/bin/tokenbridge", "/bin/true"))
    line = doctor()[0]
    assert line.startswith("FAIL desktop service:") and "not this tokenbridge" in line


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
