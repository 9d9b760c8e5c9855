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

from conftest import dbus_exec
from dbus_service import *  # noqa: F401,F403 (the harness and its fixtures; other test files import them from here too)


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
        f"[D-BUS Service]\nName={NAME}\nExec={dbus_exec(TOKENBRIDGE)} serve --idle-timeout 2\n")
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
