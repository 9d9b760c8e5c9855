"""FIDO2 keys everywhere a PIV card works: `uaf process`, `oob` (QR image, link, x-callback-url), `pending` and `device`
with only the virtual FIDO2 key; with a card and a key both present a registration asks which one on a terminal, names
both without one, and takes --token."""
import json
import os
import re

import pexpect
import pytest

from conftest import TOKENBRIDGE, tb as tb_raw
from fido2_conn import Key
from test_device import call, targets
from test_oob import payload, qr
from test_oob_image_jwe import dispatch, rendered
from test_uaf import home, process, rp  # noqa: F401 (fixtures)


@pytest.fixture
def key(tmp_path):
    k = Key(tmp_path)
    yield k
    k.stop()


@pytest.fixture
def env(key, home):
    e = dict(home, TOKENBRIDGE_VIRTUAL_FIDO=key.sock)
    [key_id] = [t["id"] for t in json.loads(tb_raw("tokens", "--json", env=e).stdout) if t["kind"] == "fido2"]
    assert tb_raw("pin", "set", "--token", key_id, env=e, pins=["1234"]).returncode == 0
    return e


def tb(env, *args, **kw):
    return tb_raw(*args, env=env, **kw)


def test_uaf_process_with_only_a_fido2_key(env, rp):
    server = rp()
    req = server.request("Reg", username="alice")
    p = process(env, req["uafRequest"], server.url, pins=("1234",))
    assert p.returncode == 0, p.stderr
    assert server.respond("Reg", json.loads(p.stdout)["uafProtocolMessage"]) == 1200
    assert [(x["username"], x["aaid"]) for x in server.registrations()] == [("alice", "7B1D#0002")]
    req = server.request("Auth", username="alice", transaction="Pay 5 EUR")
    p = process(env, req["uafRequest"], server.url, pins=("1234",))
    assert p.returncode == 0, p.stderr
    assert server.respond("Auth", json.loads(p.stdout)["uafProtocolMessage"]) == 1200
    assert server.registrations()[0]["counter"] == 1


def test_oob_with_only_a_fido2_key(env, rp, tmp_path):
    server = rp()
    image = rendered(server, qr(payload(server, "Reg", username="alice")), tmp_path / "reg.png")
    r = tb(env, "oob", "--qr-image", image, "--yes", pins=["1234"])
    assert r.returncode == 0 and "Registered alice" in r.stdout, r.stderr
    assert [x["aaid"] for x in server.registrations()] == ["7B1D#0002"]
    [t] = targets(server)
    # An encrypted dispatch, as an x-callback-url whose success target is allowed.
    os.makedirs(env["XDG_CONFIG_HOME"] + "/tokenbridge", exist_ok=True)
    with open(env["XDG_CONFIG_HOME"] + "/tokenbridge/config.json", "w") as f:
        json.dump({"callbackAllowList": ["bankapp:"]}, f)
    link = dispatch(server, t["id"], "Auth", username="alice", encrypt=True)["dispatcherInformation"]["response"]
    url = "tokenbridge://x-callback-url/oob?" + link.split("?", 1)[1] + "&x-success=bankapp://done"
    r = tb(env, "oob", url, "--yes", "--no-open", pins=["1234"])
    assert r.returncode == 0 and "Authenticated as alice" in r.stdout, r.stderr
    assert "Callback: bankapp://done" in r.stderr
    r = tb(env, "oob", "--qr-text", qr(payload(server, "Dereg", username="alice")), "--yes")
    assert r.returncode == 0 and "Deregistered 1 key(s)." in r.stdout, r.stderr
    assert server.registrations() == []


def test_pending_and_device_with_only_a_fido2_key(env, rp):
    server = rp()
    assert tb(env, "register", "--username", "alice", "--server", server.url, pins=["1234"]).returncode == 0
    [t] = targets(server)
    op = dispatch(server, t["id"], "Auth", username="alice")
    listed = json.loads(tb(env, "pending", "--json").stdout)
    assert [o["id"] for o in listed["operations"]] == [op["sessionId"]]
    r = tb(env, "pending", f"--run={op['sessionId']}", "--yes", pins=["1234"])
    assert r.returncode == 0 and "Authenticated as alice" in r.stdout, r.stderr
    r = tb(env, "device", "change", "--name", "Desk")
    assert r.returncode == 0, r.stderr
    call(server, "POST", "/_admin/mismatch", {"kind": "DeviceNameMismatch", "name": "Other", "id": t["id"]})
    r = tb(env, "device", "check", "--json")
    assert r.returncode == 0, r.stderr
    assert [m["kind"] for m in json.loads(r.stdout)["mismatches"]] == ["DeviceNameMismatch"]
    assert tb(env, "device", "sync", "--yes").returncode == 0
    assert json.loads(tb(env, "device", "check", "--json").stdout)["mismatches"] == []


def test_with_a_card_and_a_key_registration_asks_or_takes_token(card, env, rp):
    server = rp()
    p = payload(server, "Reg", username="alice")
    r = tb(env, "oob", "--qr-text", qr(p), "--yes", pins=["1234"])
    assert r.returncode == 4 and "Several tokens are present; choose one with --token ID:" in r.stderr, r.stderr
    assert card.id in r.stderr and "fido2-" in r.stderr
    assert server.registrations() == []
    # The token was not redeemed: the same QR code works with --token.
    key_id = [t["id"] for t in json.loads(tb(env, "tokens", "--json").stdout) if t["kind"] == "fido2"][0]
    r = tb(env, "oob", "--qr-text", qr(p), "--yes", "--token", key_id, pins=["1234"])
    assert r.returncode == 0, r.stderr
    assert [x["aaid"] for x in server.registrations()] == ["7B1D#0002"]
    req = server.request("Reg", username="bob")
    p = process(env, req["uafRequest"], server.url, pins=("123456",), extra=("--token", card.id))
    assert p.returncode == 0, p.stderr
    assert server.respond("Reg", json.loads(p.stdout)["uafProtocolMessage"]) == 1200
    # On a terminal the user picks.
    child = pexpect.spawn(TOKENBRIDGE, ["oob", "--qr-text", qr(payload(server, "Reg", username="carol"))],
                          env=dict(os.environ, **env), encoding="utf-8", timeout=30)
    child.expect(re.escape("About to run a registration at " + server.url))
    child.sendline("yes")
    child.expect("Several tokens can be registered:")
    child.expect(r"1\) (\S+)")
    first = child.match.group(1)
    child.expect(re.escape("Which one [1-2]? "))
    child.sendline("1" if first == card.id else "2")
    child.expect("PIN to ")
    child.sendline("123456")
    child.expect("Registered carol")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert sorted((x["username"], x["aaid"]) for x in server.registrations()) == [
        ("alice", "7B1D#0002"), ("bob", "7B1D#0001"), ("carol", "7B1D#0001")]


def test_uaf_process_with_a_card_and_a_key_asks_on_the_terminal(card, env, rp, tmp_path):
    """stdin carries the request, so the choice and the PIN are asked on the controlling terminal."""
    server = rp()
    req = server.request("Reg", username="dave")
    message = tmp_path / "request.json"
    message.write_text(json.dumps({"uafProtocolMessage": req["uafRequest"]}))
    out = tmp_path / "response.json"
    child = pexpect.spawn("/bin/sh", ["-c", f'exec "$0" uaf process --facet-id {server.url} <"$1" >"$2"',
                                      TOKENBRIDGE, str(message), str(out)],
                          env=dict(os.environ, **env), encoding="utf-8", timeout=30)
    child.expect("Several tokens can be registered:")
    child.expect(r"1\) (\S+)")
    first = child.match.group(1)
    child.expect(re.escape("Which one [1-2]? "))
    child.sendline("2" if first == card.id else "1")  # the FIDO2 key
    child.expect("PIN")
    child.sendline("1234")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    assert server.respond("Reg", json.loads(out.read_text())["uafProtocolMessage"]) == 1200
    assert [(x["username"], x["aaid"]) for x in server.registrations()] == [("dave", "7B1D#0002")]
