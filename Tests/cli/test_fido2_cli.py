"""tokenbridge with a FIDO2 key (the virtual one, reached by libfido2 through custom I/O): tokens, pin
status/set/change with the password policy, the cool-down that needs a replug, and python-fido2 checking the
result."""
import json
import signal
import os
import re
import time

import pexpect
import pytest
from fido2.ctap2 import Ctap2
from fido2.ctap2.pin import ClientPin

from conftest import TOKENBRIDGE, tb as tb_raw
from fido2_conn import Key, open_device
from implementations import FIDO2_IMPLEMENTATIONS, key_impl, make_key, pin_protocol


@pytest.fixture(params=FIDO2_IMPLEMENTATIONS)
def key(tmp_path, request):
    k = make_key(key_impl(request), tmp_path)
    yield k
    k.stop()


def tb(key, *args, **kw):
    return tb_raw(*args, env={"TOKENBRIDGE_VIRTUAL_FIDO": key.sock}, **kw)


def verified_by_python_fido2(key, pin):
    ctap = Ctap2(open_device(key.sock))
    return len(ClientPin(ctap, pin_protocol(ctap)).get_pin_token(pin)) in (16, 32)  # protocol 1: 16 bytes (solo1)


def test_tokens_shows_the_key(key):
    data = json.loads(tb(key, "tokens", "--json").stdout)
    fido = [t for t in data if t["kind"] == "fido2"]
    assert len(fido) == 1 and fido[0]["capabilities"] == ["fido2", "hmac-secret"]
    assert fido[0]["fido2"]["minPINLength"] == 4 and fido[0]["fido2"]["options"]["clientPin"] is False
    assert "PIN: not set (tokenbridge pin set" in tb(key, "tokens").stdout


def test_the_new_user_story(key):
    """No PIN → pin set; wrong old PIN (7 tries left); again until cool-down; replug; continues; correct change
    succeeds; python-fido2 verifies the new PIN."""
    assert tb(key, "pin", "change", pins=["1234", "abcdef"]).returncode == 16  # no PIN yet: pin set
    r = tb(key, "pin", "set", pins=["123"])
    assert r.returncode == 9 and "shorter than 4" in r.stderr
    assert tb(key, "pin", "set", pins=["pässwört"]).returncode == 0
    child = pexpect.spawn(TOKENBRIDGE, ["pin", "change"], env=dict(os.environ, TOKENBRIDGE_VIRTUAL_FIDO=key.sock),
                          encoding="utf-8", timeout=30)

    def attempt(current, new):
        child.expect("Current PIN: ")
        child.sendline(current)
        child.expect("New PIN: ")
        child.sendline(new)
        child.expect("Repeat new PIN: ")
        child.sendline(new)

    child.expect(re.escape("PIN 8 tries left (of 8)"))
    attempt("wrong1", "n3w-pin!")
    child.expect("Wrong PIN; 7 tries left.")
    attempt("wrong2", "n3w-pin!")
    child.expect("Wrong PIN; 6 tries left.")
    attempt("wrong3", "n3w-pin!")
    child.expect("remove and re-insert your key")
    time.sleep(0.5)
    assert child.isalive()  # waiting, sending nothing
    key.replug()
    child.expect("The key is back.")
    attempt("pässwört", "n3w-pin!")
    child.expect("PIN changed.")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert verified_by_python_fido2(key, "n3w-pin!")


def test_cool_down_gives_up_at_the_timeout(key):
    assert tb(key, "pin", "set", pins=["1234"]).returncode == 0
    r = tb(key, "pin", "change", "--timeout", "1", pins=["0000", "5678", "0001", "5678", "0002", "5678"])
    assert r.returncode == 14, r.stderr
    assert "remove and re-insert" in r.stderr
    assert "PIN: 5 tries left" in tb(key, "pin", "status").stdout  # nothing was sent while it waited


@pytest.mark.parametrize("new,code,text", [
    ("x" * 64, 9, "longer than 63"), ("abc", 9, "shorter than 4"), ("1234", 9, "same as the current"),
])
def test_password_policy_sends_nothing(key, new, code, text):
    assert tb(key, "pin", "set", pins=["1234"]).returncode == 0
    r = tb(key, "pin", "change", pins=["1234", new])
    assert r.returncode == code and text in r.stderr
    assert "PIN: 8 tries left" in tb(key, "pin", "status").stdout


def test_nfc_normalisation(key):
    # "é" typed decomposed (e + U+0301) and composed must be the same PIN.
    assert tb(key, "pin", "set", pins=["cafe\u0301"]).returncode == 0
    assert verified_by_python_fido2(key, "caf\u00e9")


def test_puk_commands_explain_fido2_has_none(key):
    assert tb(key, "pin", "set", pins=["1234"]).returncode == 0
    r = tb(key, "pin", "unblock", pins=["1", "2"])
    assert r.returncode == 11 and "FIDO2 keys have none" in r.stderr


def test_key_removed(key):
    assert tb(key, "pin", "set", pins=["1234"]).returncode == 0
    key.stop()
    r = tb(key, "pin", "status")
    assert r.returncode == 4


def test_uaf_with_the_fido2_key(key, tmp_path):
    """Register and authenticate with the FIDO2 key against the reference RP: the UAF key is derived from
    hmac-secret, and the RP verifies standard ECDSA signatures."""
    from test_uaf import RelyingParty
    server = RelyingParty(tmp_path)
    home = {"TOKENBRIDGE_VIRTUAL_FIDO": key.sock, "XDG_DATA_HOME": str(tmp_path / "d"),
            "XDG_CONFIG_HOME": str(tmp_path / "c")}
    try:
        assert tb_raw("pin", "set", env=home, pins=["1234"]).returncode == 0
        r = tb_raw("register", "--username", "alice", "--server", server.url, env=home, pins=["0000", "1234"])
        assert r.returncode == 0, r.stderr
        assert "Wrong PIN; 7 tries left" in r.stderr
        assert [x["aaid"] for x in server.registrations()] == ["7B1D#0002"]
        for text in (None, "Pay 7 EUR"):
            args = ["authenticate", "--username", "alice", "--server", server.url] + (["--transaction", text] if text else [])
            r = tb_raw(*args, env=home, pins=["1234"])
            assert r.returncode == 0, r.stderr
        assert server.registrations()[0]["counter"] == 2
        assert tb_raw("deregister", "--username", "alice", "--server", server.url, env=home).returncode == 0
        assert server.registrations() == [] and json.loads(tb_raw("authenticators", "--json", env=home).stdout) == []
    finally:
        server.stop()


@pytest.mark.parametrize("presence,code,text", [("timeout", 14, "not touched in time"), ("deny", 3, "touch denied")])
def test_touch_timeout_and_denial(tmp_path, presence, code, text):
    from test_uaf import RelyingParty
    k = Key(tmp_path, "--presence", presence)
    server = RelyingParty(tmp_path)
    home = {"TOKENBRIDGE_VIRTUAL_FIDO": k.sock, "XDG_DATA_HOME": str(tmp_path / "d"),
            "XDG_CONFIG_HOME": str(tmp_path / "c")}
    try:
        assert tb_raw("pin", "set", env=home, pins=["1234"]).returncode == 0
        r = tb_raw("register", "--username", "alice", "--server", server.url, env=home, pins=["1234"])
        assert r.returncode == code and text in r.stderr, r.stderr
        assert server.registrations() == []
        assert json.loads(tb_raw("authenticators", "--all", "--json", env=home).stdout) == []
    finally:
        server.stop()
        k.stop()


def test_key_removed_at_the_pin_prompt(key):
    assert tb(key, "pin", "set", pins=["1234"]).returncode == 0
    child = pexpect.spawn(TOKENBRIDGE, ["pin", "change"], env=dict(os.environ, TOKENBRIDGE_VIRTUAL_FIDO=key.sock),
                          encoding="utf-8", timeout=30)
    child.expect("Current PIN: ")
    key.stop()
    child.sendline("1234")
    child.expect("New PIN: ")
    child.sendline("56789")
    child.expect("Repeat new PIN: ")
    child.sendline("56789")
    child.expect("removed")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 10


def test_force_pin_change_leads_into_pin_change(tmp_path):
    from test_uaf import RelyingParty
    k = Key(tmp_path)
    assert tb(k, "pin", "set", pins=["1234"]).returncode == 0
    k.stop()
    os.path.exists(k.sock) and os.unlink(k.sock)
    k.args = ("--force-pin-change",)
    k.start()
    server = RelyingParty(tmp_path)
    home = {"TOKENBRIDGE_VIRTUAL_FIDO": k.sock, "XDG_DATA_HOME": str(tmp_path / "d"),
            "XDG_CONFIG_HOME": str(tmp_path / "c")}
    try:
        assert "asks for a new PIN" in tb(k, "pin", "status").stdout
        r = tb_raw("register", "--username", "alice", "--server", server.url, env=home, pins=["1234"])
        assert r.returncode == 16 and "pin change" in r.stderr
        assert tb(k, "pin", "change", pins=["1234", "98765"]).returncode == 0
        assert "asks for a new PIN" not in tb(k, "pin", "status").stdout
        assert tb_raw("register", "--username", "alice", "--server", server.url, env=home, pins=["98765"]).returncode == 0
    finally:
        server.stop()
        k.stop()


FAKE_KEY = r'''
import os, socket, struct, sys
path, mode = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind(path); s.listen(4)
open(path + ".ready", "w").close()
while True:
    c, _ = s.accept()
    try:
        while True:
            f = c.recv(65)
            if not f: break
            if len(f) == 65: f = f[1:]
            cid, cmd = f[:4], f[4]
            if cmd == 0x86:  # INIT: a correct answer
                body = f[7:15] + b"\x00\x00\x00\x07" + bytes([2, 0, 2, 1, 0x0D])
            elif mode == "garbage-cbor":
                # status OK, then bytes that are no CBOR item: 0xff is a "break" outside an indefinite-length
                # item (RFC 8949 3.2.1). Random bytes were wrong 1 time in a few hundred: 0xa0 is a valid empty map.
                body = b"\x00\xff" + bytes(range(0x1c, 0x1c + 39))
            elif mode == "truncated":
                body = b"\x00\xa5\x01"  # a map that ends too soon
            else:  # "wrong-cmd": answer with another command byte
                c.send((cid + bytes([0x83, 0, 1, 0])).ljust(64, b"\0")); continue
            c.send((cid + bytes([cmd, len(body) >> 8, len(body) & 255]) + body[:57]).ljust(64, b"\0"))
    except OSError:
        pass
    c.close()
'''


@pytest.mark.parametrize("mode", ["garbage-cbor", "truncated", "wrong-cmd"])
def test_malformed_answers_from_a_key_are_errors_not_crashes(tmp_path, mode):
    import subprocess
    import sys
    path = str(tmp_path / "bad.sock")
    fake = subprocess.Popen([sys.executable, "-c", FAKE_KEY, path, mode])
    try:
        from conftest import wait_until
        wait_until(lambda: os.path.exists(path + ".ready"), "fake key")
        r = tb_raw("tokens", env={"TOKENBRIDGE_VIRTUAL_FIDO": path})
        assert r.returncode in (0, 4), r.stderr
        assert "fido2-bad-sock" not in r.stdout.split("(")[0]  # not listed as a usable key
        r = tb_raw("pin", "status", "--token", "fido2-bad-sock", env={"TOKENBRIDGE_VIRTUAL_FIDO": path})
        assert r.returncode == 1 and "getInfo" in r.stderr and "Traceback" not in r.stderr, r.stderr  # says why
    finally:
        fake.kill()


def register_to_the_touch(server, env, timeout=30):
    """`register` of alice with PIN 1234 typed, up to the touch cue (shown when the key sends KEEPALIVE UP_NEEDED)."""
    child = pexpect.spawn(TOKENBRIDGE, ["register", "--username", "alice", "--server", server.url], env=env,
                          encoding="utf-8", timeout=timeout)
    child.expect("PIN to register alice")
    child.sendline("1234")
    child.expect("Touch your key")
    return child


def ctrl_c_cancels(child, server):
    child.sendintr()
    child.expect("Cancelled")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 3
    assert server.registrations() == []


@pytest.mark.parametrize("presence", ["wait", "wait-ignoring-cancel"])
def test_touch_cue_and_ctrl_c_cancels_on_the_key(presence, tmp_path):
    """Ctrl-C at the touch cue cancels: the key answers CTAPHID_CANCEL (wait), or misses it and goes on sending
    KEEPALIVE UP_NEEDED (wait-ignoring-cancel), and then the command stops waiting for it once the cancel's grace has
    passed, instead of waiting for the key's own 30 s. Then, on the key that took the cancel, a registration with
    the touches given succeeds (the other is still busy with the request it went on with, until its 30 s)."""
    from test_uaf import RelyingParty
    k = Key(tmp_path, "--presence", presence)
    server = RelyingParty(tmp_path)
    env = dict(os.environ, TOKENBRIDGE_VIRTUAL_FIDO=k.sock, XDG_DATA_HOME=str(tmp_path / "d"),
               XDG_CONFIG_HOME=str(tmp_path / "c"))
    try:
        assert tb(k, "pin", "set", pins=["1234"]).returncode == 0
        ctrl_c_cancels(register_to_the_touch(server, env, timeout=20), server)
        if presence != "wait":
            return
        child = register_to_the_touch(server, env)
        for n in range(2):  # makeCredential, then getAssertion for the hmac-secret output
            if n:
                child.expect("Touch your key")
            time.sleep(0.2)
            k.proc.send_signal(signal.SIGUSR2)
        child.expect("Registered alice")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0 and len(server.registrations()) == 1
    finally:
        server.stop()
        k.stop()


def test_resident_credentials_per_configuration(key, tmp_path):
    from test_uaf import RelyingParty
    server = RelyingParty(tmp_path)
    cfg = tmp_path / "c" / "tokenbridge"
    cfg.mkdir(parents=True)
    (cfg / "config.json").write_text(json.dumps({"fido2ResidentKeys": True}))
    home = {"TOKENBRIDGE_VIRTUAL_FIDO": key.sock, "XDG_DATA_HOME": str(tmp_path / "d"),
            "XDG_CONFIG_HOME": str(tmp_path / "c")}
    try:
        assert tb_raw("pin", "set", env=home, pins=["1234"]).returncode == 0
        assert tb_raw("register", "--username", "alice", "--server", server.url, env=home, pins=["1234"]).returncode == 0
        assert tb_raw("authenticate", "--server", server.url, env=home, pins=["1234"]).returncode == 0
        # python-fido2 finds the credential with no allowList: it is discoverable on the key.
        ctap = Ctap2(open_device(key.sock))
        cp = ClientPin(ctap, pin_protocol(ctap))
        token = cp.get_pin_token("1234", ClientPin.PERMISSION.GET_ASSERTION, "tokenbridge.uaf")
        cdh = b"\x01" * 32
        a = ctap.get_assertion("tokenbridge.uaf", cdh, pin_uv_param=cp.protocol.authenticate(token, cdh),
                               pin_uv_protocol=cp.protocol.VERSION)
        assert a.credential["id"]
    finally:
        server.stop()


def test_a_blocked_fido2_pin_points_to_a_reset_not_a_puk(tmp_path):
    """A blocked FIDO2 PIN cannot be unblocked with a PUK; the message says the only way out."""
    k = Key(tmp_path)
    try:
        assert tb(k, "pin", "set", pins=["1234"]).returncode == 0
        k.stop()
        with open(k.state) as f:
            state = json.load(f)
        state["pinRetries"] = 0  # blocked, as after 8 wrong PINs
        with open(k.state, "w") as f:
            json.dump(state, f)
        os.path.exists(k.sock) and os.unlink(k.sock)
        k.start()
        for args, pins in ((["pin", "change"], ["1234", "5678"]), (["pin", "unblock"], ["12345678", "5678"])):
            r = tb(k, *args, pins=pins)
            assert r.returncode in (7, 11), (args, r.returncode, r.stderr)
            assert "tokenbridge pin unblock" not in r.stderr and "reset" in r.stderr, r.stderr
        r = tb(k, "pin", "change", pins=["1234", "5678"])
        assert r.returncode == 7 and "no PUK" in r.stderr and "reset" in r.stderr, r.stderr
    finally:
        k.stop()
