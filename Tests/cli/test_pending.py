"""Pending out-of-band operations: the RP's dispatch-token service addresses this device's dispatch target; `tokenbridge
pending` lists the live ones (signed request) and `--run ID` runs one through the oob path, with a virtual PIV card and
with a virtual FIDO2 key."""
import json

import pytest

from conftest import tb as tb_raw
from fido2_conn import Key
from test_device import call, check, device_id, registered, targets
from test_uaf import home, rp, tb  # noqa: F401 (fixtures)


def dispatch(server, target, op, data=None, **context):
    name = {"Reg": "registration", "Auth": "authentication", "Dereg": "deregistration"}[op]
    body = {"dispatchTargetId": target, "dispatchInformation": '{"title":"Bank"}',
            "getUafRequest": {"op": op, "context": json.dumps(context)}}
    if data is not None:
        body["data"] = data
    status, answer = call(server, "POST", f"/nevisfido/token/dispatch/{name}", body)
    assert status == 200 and answer["dispatchResult"] == "dispatched", answer
    return answer


def pending(home, *args):
    r = tb(home, "pending", "--json", *args)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def test_only_live_operations_are_listed(card, rp, home):
    server = registered(card, rp, home)
    [t] = targets(server)
    live = dispatch(server, t["id"], "Auth", data="Sign in to \x1b[31mBank", username="alice")
    expired = dispatch(server, t["id"], "Auth", username="alice")
    done = dispatch(server, t["id"], "Auth", username="alice")
    assert call(server, "POST", "/_admin/expire", {"sessionId": expired["sessionId"]})[0] == 200
    link = done["dispatcherInformation"]["response"]
    assert link.startswith("https://tokenbridge.example/open?dispatchTokenResponse=")
    r = tb(home, "oob", link, "--yes", pins=["123456"])
    assert r.returncode == 0, r.stderr
    # Another device's operation is not this device's.
    status, other = call(server, "POST", "/nevisfido/token/dispatch/targets", {
        "username": "alice", "name": "Phone", "deviceId": "another-device", "signatureKey": t["signatureKey"],
        "encryptionKey": t["encryptionKey"]})
    assert status == 201
    dispatch(server, other["id"], "Auth", username="alice")

    listed = pending(home)
    assert listed["errors"] == []
    [op] = listed["operations"]
    assert (op["id"], op["operation"], op["server"], op["dispatchChannel"], op["dispatchInformation"], op["data"]) == (
        live["sessionId"], "authentication", server.url, "link", '{"title":"Bank"}', "Sign in to \x1b[31mBank")
    r = tb(home, "pending")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{live['sessionId']}  authentication at {server.url}  ")
    assert "via link  \"Sign in to \\u{1B}[31mBank\"" in r.stdout and "\x1b" not in r.stdout
    # The status service tells the redeemed and timed-out tokens apart.
    r = tb(home, "oob", expired["dispatcherInformation"]["response"], "--yes", pins=["123456"])
    assert r.returncode == 28 and "The server no longer knows this token (expired or unknown)" in r.stderr, r.stderr
    st = call(server, "POST", "/nevisfido/status", {"sessionId": expired["sessionId"]})[1]
    assert st["tokenInformation"]["tokenResult"] == "tokenTimedOut"
    assert call(server, "POST", "/nevisfido/status", {"sessionId": done["sessionId"]})[1]["tokenInformation"][
        "tokenResult"] == "tokenRedeemed"


def test_run_one_by_id(card, rp, home):
    server = registered(card, rp, home)
    [t] = targets(server)
    first = dispatch(server, t["id"], "Auth", username="alice")
    second = dispatch(server, t["id"], "Reg", username="carol")
    # --run=ID: a session id may start with "-" (base64url), which as a separate word would read as an option.
    r = tb(home, "pending", f"--run={second['sessionId']}", "--yes", pins=["123456"])
    assert r.returncode == 0, r.stderr
    assert f"About to run a registration at {server.url}" in r.stderr and "Registered carol" in r.stdout
    # The new account got its dispatch target too; the operation is no longer pending.
    assert sorted(x["username"] for x in targets(server)) == ["alice", "carol"]
    assert [o["id"] for o in pending(home)["operations"]] == [first["sessionId"]]
    r = tb(home, "pending", f"--run={first['sessionId']}", "--yes", pins=["123456"])
    assert r.returncode == 0 and "Authenticated as alice" in r.stdout, r.stderr
    assert pending(home)["operations"] == []
    assert tb(home, "pending").stdout == "No pending operations.\n"
    assert check(home) == []


def test_run_errors_have_their_codes(card, rp, home):
    server = registered(card, rp, home)
    [t] = targets(server)
    r = tb(home, "pending", "--run", "no-such-id", "--yes")
    assert r.returncode == 28, r.stderr
    assert "No pending operation no-such-id: it was processed or timed out (tokenbridge pending lists them)." \
        in r.stderr
    op = dispatch(server, t["id"], "Auth", username="alice")
    r = tb(home, "pending", f"--run={op['sessionId']}", pins=["123456"])  # no --yes, no terminal
    assert r.returncode == 3 and "Not confirmed" in r.stderr, r.stderr
    assert [o["id"] for o in pending(home)["operations"]] == [op["sessionId"]]  # nothing was redeemed
    server.post("/_admin/fault", {"scope": "device", "status": 503, "count": 3}, uaf=False)
    r = tb(home, "pending")
    assert r.returncode == 21 and f"could not ask {server.url}: The server answered HTTP 503." in r.stderr, r.stderr


@pytest.fixture
def fido2_key(tmp_path):
    k = Key(tmp_path)
    yield k
    k.stop()


def test_the_same_with_a_fido2_key(fido2_key, rp, home):
    env = dict(home, TOKENBRIDGE_VIRTUAL_FIDO=fido2_key.sock)
    server = rp()
    assert tb_raw("pin", "set", env=env, pins=["1234"]).returncode == 0
    r = tb_raw("register", "--username", "alice", "--server", server.url, env=env, pins=["1234"])
    assert r.returncode == 0, r.stderr
    [t] = targets(server)
    assert t["deviceId"] == device_id(env)
    op = dispatch(server, t["id"], "Auth", username="alice")
    r = tb_raw("pending", f"--run={op['sessionId']}", "--yes", env=env, pins=["1234"])
    assert r.returncode == 0 and "Authenticated as alice" in r.stdout, r.stderr
    [cred] = json.loads(tb_raw("authenticators", "--json", env=env).stdout)
    call(server, "POST", "/_admin/mismatch", {"kind": "MissingAuthenticatorInServer", "keyId": cred["keyID"]})
    r = tb_raw("device", "check", "--json", env=env)
    assert json.loads(r.stdout)["mismatches"] == [{
        "kind": "MissingAuthenticatorInServer", "server": server.url, "username": "alice", "aaid": "7B1D#0002",
        "keyId": cred["keyID"]}], r.stdout + r.stderr
    r = tb_raw("device", "sync", "--yes", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(tb_raw("authenticators", "--json", env=env).stdout) == []


def test_on_a_terminal_the_user_picks_one(card, rp, home):
    import os
    import re

    import pexpect

    from conftest import TOKENBRIDGE
    server = registered(card, rp, home)
    [t] = targets(server)
    dispatch(server, t["id"], "Auth", data="first", username="alice")
    dispatch(server, t["id"], "Auth", data="second", username="alice")
    child = pexpect.spawn(TOKENBRIDGE, ["pending"], env=dict(os.environ, **home), encoding="utf-8", timeout=30)
    child.expect("Run which operation?")
    child.expect(re.escape('1) ') + r'\S+  authentication at ' + re.escape(server.url) + r'  \S+  via link  "first"')
    child.expect(re.escape("Which one [1-2]? "))
    child.sendline("2")
    child.expect(re.escape(f"About to run an authentication at {server.url}"))
    child.sendline("yes")
    child.expect("PIN to ")
    child.sendline("123456")
    child.expect("Authenticated as alice")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert [o["data"] for o in pending(home)["operations"]] == ["first"]
