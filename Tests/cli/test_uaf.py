"""UAF end to end: tokenbridge + virtual PIV card + the reference relying party (Tools/rp), each test with
its own RP, card and local data."""
import json
import os
import signal
import sqlite3
import subprocess
import time

import pexpect
import pytest

from conftest import ROOT, TOKENBRIDGE, pin_tries, tb as tb_raw, wait_until
from implementations import UAF_TOKENS, UAFToken, piv_params
from relying_party import RP, RelyingParty  # noqa: F401 (other test files import them from here too)

@pytest.fixture
def home(tmp_path):
    env = {"XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    return env


@pytest.fixture
def rp(tmp_path):
    started = []

    def start(*args):
        r = RelyingParty(tmp_path, args)
        started.append(r)
        return r

    yield start
    for r in started:
        r.stop()


@pytest.fixture(params=UAF_TOKENS)
def uaf_token(request, home, tmp_path, cards, monkeypatch):
    """Each token a UAF flow runs on (implementations.UAF_TOKENS); `home` reaches it."""
    t = UAFToken(request.param, request, tmp_path, cards, monkeypatch)
    home.update(t.env)
    return t


def tb(home, *args, **kw):
    env = dict(home, **kw.pop("env", {}))
    return tb_raw(*args, env=env, **kw)


def process(home, message, facet, pins=("123456",), extra=()):
    """tokenbridge uaf process: request message in, response message out."""
    r_fd, w_fd = os.pipe()
    os.write(w_fd, "".join(p + "\n" for p in pins).encode())
    os.close(w_fd)
    p = subprocess.run([TOKENBRIDGE, "uaf", "process", "--facet-id", facet, "--pin-fd", str(r_fd), *extra],
                       input=json.dumps({"uafProtocolMessage": message}), capture_output=True, text=True,
                       env=dict(os.environ, **home), pass_fds=(r_fd,), start_new_session=True, timeout=60)
    os.close(r_fd)
    return p


@pytest.mark.parametrize("card", piv_params(), indirect=True)
def test_register_authenticate_deregister(card, rp, home):
    server = rp()
    r = tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"])
    assert r.returncode == 0, r.stderr
    regs = server.registrations()
    assert [(x["username"], x["aaid"]) for x in regs] == [("alice", "7B1D#0001")]
    listed = json.loads(tb(home, "authenticators", "--json").stdout)
    assert listed[0]["keyID"] == regs[0]["keyID"] and listed[0]["slot"] == "82"
    assert json.loads(tb(home, "accounts", "--json").stdout) == [{"username": "alice", "server": server.url}]
    device = json.loads(tb(home, "info", "--json").stdout)
    assert len(device["deviceID"]) == 36 and device["deviceName"].startswith("TokenBridge on ")

    r = tb(home, "authenticate", "--username", "alice", "--server", server.url, pins=["000000", "123456"])
    assert r.returncode == 0, r.stderr
    assert "Wrong PIN; 2 tries left" in r.stderr and "Authenticated as alice" in r.stdout
    r = tb(home, "authenticate", "--server", server.url, "--transaction", "Pay 10 CHF\x1b[2J to Bob", pins=["123456"])
    assert r.returncode == 0, r.stderr
    assert "Confirm: Pay 10 CHF\\u{1B}[2J to Bob" in r.stderr  # control sequence shown as an escape, not run
    assert server.registrations()[0]["counter"] == 2

    r = tb(home, "deregister", "--username", "alice", "--server", server.url)
    assert r.returncode == 0, r.stderr
    assert server.registrations() == []
    assert json.loads(tb(home, "authenticators", "--json").stdout) == []
    # The key in slot 82 was overwritten: it can no longer produce the registered public key.
    all_rows = json.loads(tb(home, "authenticators", "--all", "--json").stdout)
    assert [(x["slot"], x["state"]) for x in all_rows] == [("82", "abandoned")]
    # The next registration reuses the slot we own.
    assert tb(home, "register", "--username", "bob", "--server", server.url, pins=["123456"]).returncode == 0
    assert json.loads(tb(home, "authenticators", "--json").stdout)[0]["slot"] == "82"


def auth_response(server, home, **context):
    req = server.request("Auth", **context)
    assert req["statusCode"] == 1200
    p = process(home, req["uafRequest"], server.url)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["uafProtocolMessage"]


def registered(card, rp, home):
    server = rp()
    assert tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"]).returncode == 0
    return server


def test_rp_rejects_flipped_signature_byte(card, rp, home):
    server = registered(card, rp, home)
    msg = json.loads(auth_response(server, home, username="alice"))
    import base64
    a = msg[0]["assertions"][0]["assertion"]
    raw = bytearray(base64.urlsafe_b64decode(a + "=" * (-len(a) % 4)))
    raw[-5] ^= 0x01  # inside the DER signature at the end
    msg[0]["assertions"][0]["assertion"] = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    assert server.respond("Auth", json.dumps(msg)) == 1498


def test_rp_rejects_wrong_app_id(card, rp, home):
    server = registered(card, rp, home)
    msg = json.loads(auth_response(server, home, username="alice"))
    import base64
    fc = json.loads(base64.urlsafe_b64decode(msg[0]["fcParams"] + "=="))
    fc["appID"] = "https://evil.example.com/facets"
    msg[0]["fcParams"] = base64.urlsafe_b64encode(json.dumps(fc).encode()).rstrip(b"=").decode()
    assert server.respond("Auth", json.dumps(msg)) == 1498
    assert "appID mismatch" in (server.log.flush() or open(server.log.name).read())


def test_rp_rejects_replayed_challenge(card, rp, home):
    server = registered(card, rp, home)
    message = auth_response(server, home, username="alice")
    assert server.respond("Auth", message) == 1200
    assert server.respond("Auth", message) == 1491


def test_rp_rejects_a_counter_that_does_not_grow(card, rp, home):
    server = registered(card, rp, home)
    assert server.respond("Auth", auth_response(server, home, username="alice")) == 1200
    db = sqlite3.connect(os.path.join(home["XDG_DATA_HOME"], "tokenbridge", "tokenbridge.sqlite"))
    db.execute("UPDATE authenticator SET signCounter = 0")
    db.commit()
    db.close()
    assert server.respond("Auth", auth_response(server, home, username="alice")) == 1498
    assert "counter did not grow" in open(server.log.name).read()


def test_client_refuses_an_untrusted_facet(card, rp, home):
    server = rp("--facet", "https://other.example.com")
    r = tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"])
    assert r.returncode == 23, r.stderr
    assert "does not trust this client's facet ID" in r.stderr
    assert pin_tries() == 3 and server.registrations() == []


@pytest.mark.parametrize("upv", ["1.0", "1.1"])
def test_uaf_process_answers_both_versions(uaf_token, rp, home, upv):
    server = rp()
    req = server.request("Reg", username="carol", upv=upv)
    p = process(home, req["uafRequest"], server.url)
    assert p.returncode == 0, p.stderr
    response = json.loads(p.stdout)["uafProtocolMessage"]
    major, minor = map(int, upv.split("."))
    assert json.loads(response)[0]["header"]["upv"] == {"major": major, "minor": minor}
    assert server.respond("Reg", response) == 1200
    assert [x["aaid"] for x in server.registrations()] == [uaf_token.aaid]
    assert server.respond("Auth", auth_response(server, home, username="carol", upv=upv)) == 1200


@pytest.mark.parametrize("message,fragment", [
    ("not json", "malformed"),
    ("[]", "no request"),
    ('[{"header":{"upv":{"major":1,"minor":2},"op":"Reg","appID":""},"challenge":"x","username":"u",'
     '"policy":{"accepted":[]}}]', "1.2"),
    ('[{"header":{"op":"Reg"}}]', "malformed"),
    ("[" * 100000, "malformed"),
])
def test_uaf_process_refuses_bad_messages(card, home, message, fragment):
    p = process(home, message, "https://client.example")
    assert p.returncode == 24, p.stderr
    assert fragment in p.stderr and "Traceback" not in p.stderr


def test_uaf_process_refuses_huge_input(card, home):
    p = subprocess.run([TOKENBRIDGE, "uaf", "process", "--facet-id", "https://x.example"],
                       input="[" + " " * (2 << 20) + "]", capture_output=True, text=True, env=dict(os.environ, **home))
    assert p.returncode == 24 and "too large" in p.stderr


def test_no_suitable_authenticator_says_why(card, rp, home):
    server = rp("--aaid", "FFFF#FFFF")
    r = tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"])
    assert r.returncode == 22, r.stderr
    assert "7B1D#0001" in r.stderr and "FFFF#FFFF" in r.stderr


def test_server_errors_and_timeouts(card, rp, home, tmp_path):
    server = rp()
    server.fault(status=500)
    r = tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"])
    assert r.returncode == 21 and "HTTP 500" in r.stderr
    server.fault(skip=1, status=503)  # the request leg succeeds, the response leg fails
    r = tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"])
    assert r.returncode == 21, r.stderr
    rows = json.loads(tb(home, "authenticators", "--all", "--json").stdout)
    assert [x["state"] for x in rows] == ["abandoned"]  # nothing half-registered
    cfg = tmp_path / "config" / "tokenbridge"
    cfg.mkdir(parents=True)
    (cfg / "config.json").write_text(json.dumps({"networkTimeout": 1}))
    server.fault(delay=3)
    r = tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"])
    assert r.returncode == 21 and "did not answer in time" in r.stderr


def test_server_must_be_https_unless_loopback(card, home):
    r = tb(home, "register", "--username", "a", "--server", "http://fido.example.com", pins=["123456"])
    assert r.returncode == 27 and "https" in r.stderr
    r = tb(home, "register", "--username", "a")
    assert r.returncode == 27 and "--server" in r.stderr
    r = tb(home, "register", "--username", "a", "--server", "https://127.0.0.1:1", pins=["123456"])
    assert r.returncode == 21


def test_server_forgot_the_key_1481(card, rp, home):
    server = registered(card, rp, home)
    assert server.request("Dereg", username="alice")["statusCode"] == 1200  # server-side only
    r = tb(home, "authenticate", "--server", server.url, pins=["123456"])
    assert r.returncode == 26, r.stderr
    assert "1481" in r.stderr and "tokenbridge local delete" in r.stderr


def test_kill_9_during_registration_leaves_nothing_inconsistent(card, rp, home):
    server = rp()
    child = pexpect.spawn(TOKENBRIDGE, ["register", "--username", "alice", "--server", server.url],
                          env=dict(os.environ, **home), encoding="utf-8", timeout=30)
    child.expect("PIN to register alice: ")
    child.kill(signal.SIGKILL)
    child.close()
    r = tb(home, "authenticators", "--all", "--json")
    assert "1 interrupted registration(s) cleaned up" in r.stderr
    assert [x["state"] for x in json.loads(r.stdout)] == ["abandoned"]
    assert server.registrations() == []
    assert tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"]).returncode == 0
    assert json.loads(tb(home, "authenticators", "--json").stdout)[0]["slot"] == "82"  # slot reused


def test_token_removed_between_pin_and_signature(card, rp, home):
    server = registered(card, rp, home)
    child = pexpect.spawn(TOKENBRIDGE, ["authenticate", "--username", "alice", "--server", server.url],
                          env=dict(os.environ, **home), encoding="utf-8", timeout=30)
    child.expect("PIN to sign in as alice: ")
    card.remove()
    child.sendline("123456")
    child.expect("removed")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 10


def test_local_data_is_private(card, rp, home):
    registered(card, rp, home)
    path = os.path.join(home["XDG_DATA_HOME"], "tokenbridge", "tokenbridge.sqlite")
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
    blob = open(path, "rb").read()
    assert b"123456" not in blob  # no PIN in local data


def test_info(home):
    r = tb(home, "info", "--json", "--server", "https://fido.example.com")
    info = json.loads(r.stdout)
    assert info["pivAAID"] == "7B1D#0001" and info["facetID"] == "https://fido.example.com"


@pytest.mark.parametrize("path,ok", [("facets-moved", False), ("facets-moved-authorized", True)])
def test_app_id_redirects_need_authorization(card, rp, home, path, ok):
    server = rp("--app-id-path", f"/nevisfido/uaf/1.1/{path}")  # its appID URL answers with a redirect
    req = server.request("Reg", username="dave")
    app_id = json.loads(req["uafRequest"])[0]["header"]["appID"]
    assert app_id.endswith(path)
    p = process(home, req["uafRequest"], server.url)
    if ok:
        assert p.returncode == 0, p.stderr
    else:
        assert p.returncode == 23 and "trusted-facets list could not be read" in p.stderr


def test_several_tokens_register_asks_or_needs_token(cards, rp, home):
    a, b = cards(0, 5000300), cards(1, 5000301)
    server = rp()
    r = tb(home, "register", "--username", "erin", "--server", server.url, pins=["123456"])
    assert r.returncode == 4 and a.id in r.stderr and b.id in r.stderr
    r = tb(home, "register", "--username", "erin", "--server", server.url, "--token", b.id, pins=["123456"])
    assert r.returncode == 0, r.stderr
    assert json.loads(tb(home, "authenticators", "--json").stdout)[0]["token"] == b.id
    child = pexpect.spawn(TOKENBRIDGE, ["register", "--username", "frank", "--server", server.url],
                          env=dict(os.environ, **home), encoding="utf-8", timeout=30)
    child.expect(r"Which one \[1-2\]\? ")
    child.sendline("1")
    child.expect("PIN to register frank: ")
    child.sendline("123456")
    child.expect("Registered frank")
    child.expect(pexpect.EOF)
    rows = {x["username"]: x["token"] for x in json.loads(tb(home, "authenticators", "--json").stdout)}
    assert rows == {"erin": b.id, "frank": a.id}


def test_kill_9_after_the_key_was_made_before_the_server_answered(card, rp, home):
    server = rp()
    server.fault(skip=1, delay=20, status=500)  # the response leg hangs: the key exists, nothing confirmed
    r_fd, w_fd = os.pipe()
    os.write(w_fd, b"123456\n")
    os.close(w_fd)
    proc = subprocess.Popen([TOKENBRIDGE, "register", "--username", "alice", "--server", server.url, "--pin-fd",
                             str(r_fd)], env=dict(os.environ, **home), pass_fds=(r_fd,), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    os.close(r_fd)
    db_path = os.path.join(home["XDG_DATA_HOME"], "tokenbridge", "tokenbridge.sqlite")

    def key_made():
        try:
            db = sqlite3.connect(db_path)
            rows = db.execute("SELECT state, length(publicKey) FROM authenticator").fetchall()
            db.close()
            return rows == [("pending", 65)]
        except sqlite3.Error:
            return False

    wait_until(key_made, "a pending registration with its key")
    proc.kill()
    proc.wait()
    r = tb(home, "authenticators", "--all", "--json")
    assert "1 interrupted registration(s) cleaned up" in r.stderr
    assert [(x["slot"], x["state"]) for x in json.loads(r.stdout)] == [("82", "abandoned")]
    assert server.registrations() == []


def provision_attestation(tmp_path, home):
    """An operator's attestation key in slot 9e with a certificate from a test root (openssl)."""
    r = tb(home, "key", "generate", "--slot", "9e")
    assert r.returncode == 0, r.stderr
    (tmp_path / "att.pub").write_text(r.stdout)
    run = lambda *a: subprocess.run(a, check=True, capture_output=True, cwd=tmp_path)
    run("openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "root.key")
    run("openssl", "req", "-x509", "-new", "-key", "root.key", "-subj", "/CN=test root", "-days", "2", "-out", "root.pem")
    run("openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "other.key")
    run("openssl", "req", "-x509", "-new", "-key", "other.key", "-subj", "/CN=other", "-days", "2", "-out", "other.pem")
    run("openssl", "x509", "-new", "-subj", "/CN=TokenBridge attestation", "-key", "root.key", "-force_pubkey",
        "att.pub", "-days", "2", "-out", "att.pem")
    from conftest import piv_tool
    assert piv_tool("-a", "import-certificate", "-s", "9e", "-i", str(tmp_path / "att.pem")).returncode == 0
    cfg = tmp_path / "config" / "tokenbridge"
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "config.json").write_text(json.dumps({"attestationSlot": "9e"}))


def test_basic_full_attestation(card, rp, home, tmp_path):
    provision_attestation(tmp_path, home)
    good = rp("--attestation-root", str(tmp_path / "root.pem"))
    r = tb(home, "register", "--username", "alice", "--server", good.url, pins=["123456"])
    assert r.returncode == 0, r.stderr
    assert "basic full attestation verified" in open(good.log.name).read()
    assert tb(home, "authenticate", "--username", "alice", "--server", good.url, pins=["123456"]).returncode == 0
    wrong = rp("--attestation-root", str(tmp_path / "other.pem"))
    r = tb(home, "register", "--username", "bob", "--server", wrong.url, pins=["123456"])
    assert r.returncode == 20 and "1496" in r.stderr


@pytest.mark.parametrize("fault,code,text", [
    ({"status": 404}, 21, "HTTP 404"),
    ({"status": 200, "body": "<html>oops"}, 21, "not what the protocol says"),
    ({"status": 200, "body": '{"statusCode": 1200, "uafRequest": "[{\\"header\\": 5}]"}'}, 24, "malformed"),
    ({"status": 200, "body": '{"statusCode": 1200, "uafRequest": "' + "A" * 50 + '"}'}, 24, "malformed"),
    ({"status": 200, "body": '{"statusCode": 1403}'}, 20, "1403"),
])
def test_bad_server_answers(card, rp, home, fault, code, text):
    server = rp()
    server.fault(**fault)
    r = tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"])
    assert r.returncode == code, r.stderr
    assert text in r.stderr and "Traceback" not in r.stderr
    assert pin_tries() == 3  # nothing was attempted on the token
