"""tokenbridge fido2 info / credentials / reset with the virtual key (libfido2 custom I/O) and the reference RP;
python-fido2 checks the virtual key's credential management and reset rules on its own.

The reset flow: the key is named and what the reset destroys is listed; the key id must be typed in full; the
key is replugged (virtual-token removes its socket file and makes it again, which tokenbridge sees through
inotify); the key that comes back must be the same one; the reset goes inside the power-up window with a touch;
the dependent UAF registrations are deregistered at the RP and removed from local data. Every way it can stop
before the reset leaves the key and local data as they were (asserted)."""
import json
import os
import re
import subprocess

import pexpect
import pytest
from fido2.ctap import CtapError
from fido2.ctap2 import Ctap2
from fido2.ctap2.credman import CredentialManagement
from fido2.ctap2.pin import ClientPin, PinProtocolV2

from conftest import TOKENBRIDGE, tb as tb_raw
from fido2_conn import Key, open_device
from implementations import FIDO2_IMPLEMENTATIONS, key_impl, make_key, pin_protocol, skip_unless_simulator
from test_uaf import RelyingParty

PIN = "1234"


@pytest.fixture(params=FIDO2_IMPLEMENTATIONS)
def key(tmp_path, request):
    k = make_key(key_impl(request), tmp_path)
    yield k
    k.stop()


@pytest.fixture
def server(tmp_path):
    s = RelyingParty(tmp_path)
    yield s
    s.stop()


def home(key, tmp_path):
    return {"TOKENBRIDGE_VIRTUAL_FIDO": key.sock, "XDG_DATA_HOME": str(tmp_path / "d"),
            "XDG_CONFIG_HOME": str(tmp_path / "c")}


def key_id(key):
    return "fido2-" + re.sub(r"[^a-z0-9]", "-", os.path.basename(key.sock).lower())


def restart(key, *args):
    """The same key (state file) in a new process with other options; its power-up starts the reset window."""
    key.stop()
    key.args = args
    key.start()


def key_state(key):
    """What a reset would change (the sign counter moves with every assertion, the silent probe included)."""
    if getattr(key, "impl", "virtual") != "virtual":
        return third_party_key_state(key)
    s = json.load(open(key.state))
    return {"pin": s.get("pinHash"), "retries": s["pinRetries"], "aaguid": s["aaguid"],
            "credentials": sorted(c["id"] for c in s["credentials"])}


def third_party_key_state(key):
    """key_state of a firmware whose state file we cannot read, as python-fido2 sees it: PIN set or not, tries,
    AAGUID and the discoverable credentials (credential management, with the PIN when one is set)."""
    ctap = key.ctap()
    protocol = pin_protocol(ctap)
    pin_set = ctap.info.options.get("clientPin") is True
    creds = []
    if pin_set:
        token = ClientPin(ctap, protocol).get_pin_token(PIN, ClientPin.PERMISSION.CREDENTIAL_MGMT)
        cm = CredentialManagement(ctap, protocol, token)
        if cm.get_metadata()[CredentialManagement.RESULT.EXISTING_CRED_COUNT]:
            for rp in cm.enumerate_rps():
                for c in cm.enumerate_creds(rp[CredentialManagement.RESULT.RP_ID_HASH]):
                    creds.append(c[CredentialManagement.RESULT.CREDENTIAL_ID]["id"].hex())
    return {"pin": True if pin_set else None, "retries": ClientPin(ctap, protocol).get_pin_retries()[0],
            "aaguid": str(ctap.info.aaguid), "credentials": sorted(creds)}


def local(key, tmp_path):
    r = tb_raw("authenticators", "--json", env=home(key, tmp_path))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def snapshot(key, server, tmp_path):
    return key_state(key), local(key, tmp_path), server.registrations()


def register(key, server, tmp_path, *users):
    env = home(key, tmp_path)
    assert tb_raw("pin", "set", env=env, pins=[PIN]).returncode == 0
    for u in users:
        r = tb_raw("register", "--username", u, "--server", server.url, env=env, pins=[PIN])
        assert r.returncode == 0, r.stderr


def spawn_reset(key, tmp_path, *args):
    return pexpect.spawn(TOKENBRIDGE, ["fido2", "reset", *args], env=dict(os.environ, **home(key, tmp_path)),
                         encoding="utf-8", timeout=30)


def confirm_and_wait_for_replug(child, key, users):
    child.expect(f"Reset [^\r\n]*{re.escape(key_id(key))}")  # the product name is the key's
    for u in users:
        child.expect(f"{u} at http://127.0.0.1")
    child.expect(re.escape(f"type the key id ({key_id(key)}): "))
    child.sendline(key_id(key))
    child.expect("Remove the key")


def finish(child):
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus


# --- info and credentials -------------------------------------------------------------------------------------

def test_info_shows_what_fido2_token_shows(key):
    data = json.loads(tb_raw("fido2", "info", "--json", env={"TOKENBRIDGE_VIRTUAL_FIDO": key.sock}).stdout)
    if key.impl != "virtual":  # what the key itself says, as python-fido2 reads it
        info = key.ctap().info
        assert data["versions"] == info.versions and data["extensions"] == info.extensions
        # (The session's CanoKey has had a PIN, so it counts 8 before one is set; a never-used one cannot say:
        # test_info_of_a_never_used_canokey.)
        assert data["pinRetries"] == 8 and data["supportsCredentialManagement"] is True
        assert "PIN: not set" in tb_raw("fido2", "info", env={"TOKENBRIDGE_VIRTUAL_FIDO": key.sock}).stdout
        return
    assert data["versions"] == ["FIDO_2_0", "FIDO_2_1_PRE", "FIDO_2_1"]
    assert data["extensions"] == ["hmac-secret"]
    assert data["options"]["credMgmt"] is True and data["supportsCredentialManagement"] is True
    assert data["remainingDiscoverableCredentials"] == 25 and data["minPINLength"] == 4
    assert data["pinRetries"] == 8
    text = tb_raw("fido2", "info", env={"TOKENBRIDGE_VIRTUAL_FIDO": key.sock}).stdout
    assert "discoverable credentials: yes, room for 25 more" in text and "PIN: not set" in text


def test_info_of_a_never_used_canokey(tmp_path, request):
    """A CanoKey that never had a PIN answers getPINRetries with a negative number (-61: canokey-core stores the
    counter only when a PIN is set, and answers the file system's "no such attribute" in its place), which
    libfido2 does not take (fido2-token -I: "pin retries: undefined"). tokenbridge shows the PIN as not set and no
    tries: `pinRetries` is absent from the JSON (nil: "no PIN set, or the key would not say"), as for a key whose
    count it cannot read; nothing shows -61."""
    request.getfixturevalue("third_party_built")
    key = make_key("canokey", tmp_path, fresh=True)
    try:
        ctap = key.ctap()
        assert ctap.client_pin(1, ClientPin.CMD.GET_PIN_RETRIES)[3] < 0  # the firmware's answer, as it is
        env = {"TOKENBRIDGE_VIRTUAL_FIDO": key.sock}
        r = tb_raw("fido2", "info", "--json", env=env)
        assert r.returncode == 0, r.stderr
        data = json.loads(r.stdout)
        assert "pinRetries" not in data and data["options"]["clientPin"] is False, data
        for args in (["fido2", "info"], ["tokens"], ["pin", "status"]):
            r = tb_raw(*args, env=env)
            assert r.returncode == 0 and "PIN: not set" in r.stdout and "tries" not in r.stdout, (args, r.stdout)
            assert "-61" not in r.stdout + r.stderr
        # Once a PIN is set the counter exists: 8.
        assert tb_raw("pin", "set", env=env, pins=[PIN]).returncode == 0
        assert json.loads(tb_raw("fido2", "info", "--json", env=env).stdout)["pinRetries"] == 8
    finally:
        key.stop()


def make_resident(key, rp, user_id, name):
    ctap = key.ctap()
    protocol = pin_protocol(ctap)
    client_pin = ClientPin(ctap, protocol)
    token = client_pin.get_pin_token(PIN, ClientPin.PERMISSION.MAKE_CREDENTIAL, rp)
    cdh = os.urandom(32)
    r = ctap.make_credential(cdh, {"id": rp, "name": rp.upper()}, {"id": user_id, "name": name, "displayName": name},
                             [{"type": "public-key", "alg": -7}], options={"rk": True},
                             pin_uv_param=protocol.authenticate(token, cdh), pin_uv_protocol=protocol.VERSION)
    return r.auth_data.credential_data.credential_id


def test_credentials_list_and_delete(key, tmp_path):
    env = home(key, tmp_path)
    assert tb_raw("pin", "set", env=env, pins=[PIN]).returncode == 0
    make_resident(key, "example.com", b"u1", "alice")
    make_resident(key, "example.org", b"u2", "bob")
    listed = json.loads(tb_raw("fido2", "credentials", "--json", env=env, pins=[PIN]).stdout)
    assert sorted((c["credential"]["rpID"], c["credential"]["userName"], c["createdByTokenBridge"]) for c in listed) \
        == [("example.com", "alice", False), ("example.org", "bob", False)]
    bob = next(c for c in listed if c["credential"]["userName"] == "bob")
    # The confirmation is the RP id typed in full; anything else deletes nothing.
    r = tb_raw("fido2", "credentials", "delete", bob["id"], env=env, pins=[PIN, "y"])
    assert r.returncode == 32 and "Not confirmed" in r.stderr
    assert len(json.loads(tb_raw("fido2", "credentials", "--json", env=env, pins=[PIN]).stdout)) == 2
    r = tb_raw("fido2", "credentials", "delete", bob["id"], env=env, pins=[PIN, "example.org"])
    assert r.returncode == 0, r.stderr
    left = json.loads(tb_raw("fido2", "credentials", "--json", env=env, pins=[PIN]).stdout)
    assert [c["credential"]["userName"] for c in left] == ["alice"]
    # Wrong PIN goes through the PIN engine: tries shown, nothing listed.
    r = tb_raw("fido2", "credentials", env=env, pins=["0000"])
    assert r.returncode == 6 and "Wrong PIN; 7 tries left" in r.stderr


def test_credentials_made_by_tokenbridge(key, server, tmp_path):
    """A UAF registration with a discoverable credential shows as ours, with its KeyID."""
    env = home(key, tmp_path)
    (tmp_path / "c" / "tokenbridge").mkdir(parents=True)
    (tmp_path / "c" / "tokenbridge" / "config.json").write_text(json.dumps({"fido2ResidentKeys": True}))
    register(key, server, tmp_path, "alice")
    listed = json.loads(tb_raw("fido2", "credentials", "--json", env=env, pins=[PIN]).stdout)
    assert len(listed) == 1 and listed[0]["createdByTokenBridge"] is True
    assert listed[0]["credential"]["rpID"] == "tokenbridge.uaf"
    assert listed[0]["registrations"] == [a["keyID"] for a in local(key, tmp_path)]


# --- python-fido2 against the virtual key ---------------------------------------------------------------------

def test_python_fido2_credential_management(key):
    skip_unless_simulator(key.impl, "getinfo")
    ctap = key.ctap()
    assert ctap.info.options["credMgmt"] is True and ctap.info.options["credentialMgmtPreview"] is True
    assert ctap.info.remaining_disc_creds == 25
    ClientPin(ctap, PinProtocolV2()).set_pin(PIN)
    ids = [make_resident(key, "example.com", b"u1", "alice"), make_resident(key, "example.com", b"u2", "bob"),
           make_resident(key, "example.net", b"u3", "carol")]
    # Same RP and user again: replaces, does not add.
    ids[0] = make_resident(key, "example.com", b"u1", "alice2")
    client_pin = ClientPin(ctap, PinProtocolV2())
    # A token without the cm permission is refused.
    mc_token = client_pin.get_pin_token(PIN, ClientPin.PERMISSION.MAKE_CREDENTIAL, "example.com")
    with pytest.raises(CtapError) as e:
        CredentialManagement(ctap, PinProtocolV2(), mc_token).get_metadata()
    assert e.value.code == CtapError.ERR.PIN_AUTH_INVALID
    cm = CredentialManagement(ctap, PinProtocolV2(), client_pin.get_pin_token(PIN, ClientPin.PERMISSION.CREDENTIAL_MGMT))
    meta = cm.get_metadata()
    assert meta[CredentialManagement.RESULT.EXISTING_CRED_COUNT] == 3
    assert meta[CredentialManagement.RESULT.MAX_REMAINING_COUNT] == 22
    rps = cm.enumerate_rps()
    assert sorted(r[CredentialManagement.RESULT.RP]["id"] for r in rps) == ["example.com", "example.net"]
    com = next(r for r in rps if r[CredentialManagement.RESULT.RP]["id"] == "example.com")
    creds = cm.enumerate_creds(com[CredentialManagement.RESULT.RP_ID_HASH])
    assert sorted(c[CredentialManagement.RESULT.USER]["name"] for c in creds) == ["alice2", "bob"]
    assert {c[CredentialManagement.RESULT.CREDENTIAL_ID]["id"] for c in creds} == {ids[0], ids[1]}
    cm.delete_cred({"id": ids[1], "type": "public-key"})
    assert cm.get_metadata()[CredentialManagement.RESULT.EXISTING_CRED_COUNT] == 2
    with pytest.raises(CtapError) as e:
        cm.delete_cred({"id": ids[1], "type": "public-key"})
    assert e.value.code == CtapError.ERR.NO_CREDENTIALS
    # The "next" subcommands without a begin are refused.
    with pytest.raises(CtapError) as e:
        ctap.credential_mgmt(CredentialManagement.CMD.ENUMERATE_RPS_NEXT)
    assert e.value.code == CtapError.ERR.NOT_ALLOWED
    getinfo = Ctap2(open_device(key.sock)).get_info()
    assert getinfo.remaining_disc_creds == 23


def test_python_fido2_reset_rules(tmp_path):
    """Reset: inside the window after a replug it erases; outside NOT_ALLOWED; a refused touch
    OPERATION_DENIED, a touch that never comes USER_ACTION_TIMEOUT — and those three erase nothing."""
    k = Key(tmp_path, "--reset-window", "1")
    try:
        ClientPin(k.ctap(), PinProtocolV2()).set_pin(PIN)
        before = key_state(k)
        import time
        time.sleep(1.5)
        with pytest.raises(CtapError) as e:
            k.ctap().reset()
        assert e.value.code == CtapError.ERR.NOT_ALLOWED and key_state(k) == before
        for presence, code in [("deny", CtapError.ERR.OPERATION_DENIED), ("timeout", CtapError.ERR.USER_ACTION_TIMEOUT)]:
            restart(k, "--presence", presence)
            with pytest.raises(CtapError) as e:
                k.ctap().reset()
            assert e.value.code == code and key_state(k) == before
        restart(k, "--reset-window", "1")
        time.sleep(1.5)
        k.replug()  # the window starts again at plug-in
        k.ctap().reset()
        after = key_state(k)
        assert after["pin"] is None and after["credentials"] == [] and after["aaguid"] == before["aaguid"]
    finally:
        k.stop()


# --- the guided reset -----------------------------------------------------------------------------------------

def test_reset_erases_key_and_deregisters(key, server, tmp_path):
    register(key, server, tmp_path, "alice", "bob")
    assert len(server.registrations()) == 2 and len(local(key, tmp_path)) == 2
    child = spawn_reset(key, tmp_path)
    confirm_and_wait_for_replug(child, key, ["alice", "bob"])
    key.replug()
    child.expect("The key is back")
    if key.impl != "canokey":  # the cue follows the key's KEEPALIVE UP_NEEDED; CanoKey in NFC mode sends none
        child.expect(re.escape(f"Touch your key ({key_id(key)}) to reset it."))
    child.expect("was reset")
    child.expect("alice at [^\r\n]*: deregistered at the server and removed here")
    child.expect("bob at [^\r\n]*: deregistered at the server and removed here")
    assert finish(child) == 0
    state = key_state(key)
    assert state["pin"] is None and state["credentials"] == [] and state["retries"] == 8
    assert server.registrations() == [] and local(key, tmp_path) == []


def test_reset_of_a_blocked_key(key, server, tmp_path):
    """The real use: the PIN is blocked; the message points to fido2 reset, which needs no PIN."""
    skip_unless_simulator(key.impl, "state")
    register(key, server, tmp_path, "alice")
    restart(key)  # edit the state file while the key is stopped: 0 tries left
    key.stop()
    s = json.load(open(key.state))
    s["pinRetries"] = 0
    json.dump(s, open(key.state, "w"))
    key.start()
    r = tb_raw("authenticate", "--username", "alice", "--server", server.url, env=home(key, tmp_path), pins=[PIN])
    assert r.returncode == 7 and f"the only way back is `tokenbridge fido2 reset --token {key_id(key)}`" in r.stderr
    child = spawn_reset(key, tmp_path)
    confirm_and_wait_for_replug(child, key, ["alice"])
    key.replug()
    child.expect("alice at [^\r\n]*: deregistered at the server and removed here")
    assert finish(child) == 0
    assert key_state(key)["credentials"] == [] and server.registrations() == [] and local(key, tmp_path) == []


def test_confirmation_refused(key, server, tmp_path):
    register(key, server, tmp_path, "alice")
    before = snapshot(key, server, tmp_path)
    for answer in ["y", "yes", key_id(key)[:-1]]:
        child = spawn_reset(key, tmp_path)
        child.expect("type the key id")
        child.sendline(answer)
        child.expect("Not confirmed; nothing was changed.")
        assert finish(child) == 32
    assert snapshot(key, server, tmp_path) == before
    # No terminal and no --pin-fd: nothing to confirm with, nothing done.
    r = tb_raw("fido2", "reset", env=home(key, tmp_path))
    assert r.returncode == 64 and "No terminal" in r.stderr
    assert snapshot(key, server, tmp_path) == before


def test_missed_window(key, server, tmp_path):
    skip_unless_simulator(key.impl, "options")
    register(key, server, tmp_path, "alice")
    restart(key, "--reset-window", "0")
    before = snapshot(key, server, tmp_path)
    child = spawn_reset(key, tmp_path)
    confirm_and_wait_for_replug(child, key, ["alice"])
    key.replug()
    child.expect("The key refused the reset: a key takes it only within a few seconds")
    assert finish(child) == 33
    assert snapshot(key, server, tmp_path) == before


@pytest.mark.parametrize("presence,code,text", [("deny", 3, "touch denied"), ("timeout", 14, "not touched in time")])
def test_no_touch(key, server, tmp_path, presence, code, text):
    skip_unless_simulator(key.impl, "presence")
    register(key, server, tmp_path, "alice")
    restart(key, "--presence", presence)
    before = snapshot(key, server, tmp_path)
    child = spawn_reset(key, tmp_path)
    confirm_and_wait_for_replug(child, key, ["alice"])
    key.replug()
    child.expect(text)
    assert finish(child) == code
    assert snapshot(key, server, tmp_path) == before


def test_a_different_key_comes_back(key, server, tmp_path):
    """After the unplug another key appears on the same socket: refused by its AAGUID, neither key reset."""
    skip_unless_simulator(key.impl, "swap")
    register(key, server, tmp_path, "alice")
    before = snapshot(key, server, tmp_path)
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other = Key(other_dir)  # its own socket for now: give it a PIN and a credential so a reset would show
    try:
        ClientPin(other.ctap(), PinProtocolV2()).set_pin(PIN)
        other.stop()
        other_before = key_state(other)
        child = spawn_reset(key, tmp_path)
        confirm_and_wait_for_replug(child, key, ["alice"])
        key.stop()  # unplugged (the socket file goes) ...
        other.sock = key.sock  # ... and the other key is plugged in where it was
        other.start()
        child.expect(f"is not {key_id(key)}")
        assert finish(child) == 34
        assert key_state(other) == other_before
    finally:
        other.stop()
    key.start()
    assert snapshot(key, server, tmp_path) == before


def test_same_model_other_key_is_refused(key, server, tmp_path):
    """Same AAGUID (a second key of the same model) but it does not know our credentials: refused."""
    skip_unless_simulator(key.impl, "state")
    register(key, server, tmp_path, "alice")
    before = snapshot(key, server, tmp_path)
    other_dir = tmp_path / "twin"
    other_dir.mkdir()
    twin = json.load(open(key.state))
    twin["credentials"] = []
    json.dump(twin, open(other_dir / "fido.json", "w"))
    other = Key.__new__(Key)
    other.sock, other.state, other.args = key.sock, str(other_dir / "fido.json"), ()
    child = spawn_reset(key, tmp_path)
    confirm_and_wait_for_replug(child, key, ["alice"])
    key.stop()
    other.start()
    try:
        child.expect("has the same AAGUID but does not know")
        assert finish(child) == 34
        assert key_state(other)["credentials"] == [] and key_state(other)["pin"] == twin["pinHash"]
    finally:
        other.stop()
    key.start()
    assert snapshot(key, server, tmp_path) == before


def test_no_replug_times_out(key, server, tmp_path):
    register(key, server, tmp_path, "alice")
    before = snapshot(key, server, tmp_path)
    child = spawn_reset(key, tmp_path, "--timeout", "2")
    confirm_and_wait_for_replug(child, key, ["alice"])
    child.expect("No answer within the time allowed; nothing was changed.")
    assert finish(child) == 14
    assert snapshot(key, server, tmp_path) == before


def test_server_unreachable_after_reset_still_removes_locally(key, server, tmp_path):
    """Deregistration is best effort: a server that fails is reported, and the registration still goes locally
    (its key is gone with the reset)."""
    register(key, server, tmp_path, "alice")
    server.stop()
    child = spawn_reset(key, tmp_path)
    confirm_and_wait_for_replug(child, key, ["alice"])
    key.replug()
    child.expect("alice at [^\r\n]*: not deregistered at the server [^\r\n]*removed here")
    assert finish(child) == 0
    assert local(key, tmp_path) == [] and key_state(key)["credentials"] == []
    server.proc = subprocess.Popen(["true"])  # the fixture stops it again
    server.log = open(os.devnull, "w")
