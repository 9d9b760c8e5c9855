"""tokenbridge fido2 info and credentials with the virtual key (libfido2 custom I/O), the firmwares we did not write
and the reference RP; python-fido2 checks the virtual key's credential management on its own. The reset:
test_fido2_reset.py."""
import json
import os
import re
import subprocess

import pexpect
import pytest
from fido2.ctap import CtapError
from fido2.ctap2 import Ctap2
from fido2.ctap2.config import Config
from fido2.ctap2.credman import CredentialManagement
from fido2.ctap2.pin import ClientPin, PinProtocolV2

from conftest import TOKENBRIDGE, tb as tb_raw
from fido2_conn import Key, open_device
from implementations import FIDO2_IMPLEMENTATIONS, key_impl, make_key, pin_protocol, skip_unless_simulator
from test_uaf import RelyingParty
from fido2_maintenance import (  # the fixtures (key, server) and helpers
    PIN, confirm_and_wait_for_replug, finish, home, key, key_id, key_state, local, register, restart, server, snapshot,
    spawn_reset, third_party_key_state)

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
    # The confirmation is the RP id typed in full; anything else deletes nothing. The id after `--`: a base64url id
    # begins with "-" one time in 64 (docs/fido2.md).
    r = tb_raw("fido2", "credentials", "delete", "--", bob["id"], env=env, pins=[PIN, "y"])
    assert r.returncode == 32 and "Not confirmed" in r.stderr
    assert len(json.loads(tb_raw("fido2", "credentials", "--json", env=env, pins=[PIN]).stdout)) == 2
    r = tb_raw("fido2", "credentials", "delete", "--", bob["id"], env=env, pins=[PIN, "example.org"])
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


def test_python_fido2_config_forces_a_pin_change(tmp_path):
    """authenticatorConfig's setMinPINLength (CTAP 2.1 §6.11.4) as python-fido2 sends it to the virtual key (what
    `provision` asks of a key it gave a fresh PIN): refused without a PIN, without a token, with a token lacking the
    acfg permission, and for a shorter minimum; then forcePINChange and the new minimum in getInfo, every PIN token
    refused until the PIN is changed, and tokenbridge naming it. (CanoKey and solo1 do not offer authnrCfg.)"""
    key = make_key("virtual", tmp_path, fresh=True)
    try:
        ctap = key.ctap()
        assert Config.is_supported(ctap.info) and ctap.info.options["setMinPINLength"] is True
        with pytest.raises(CtapError) as e:
            Config(ctap).set_min_pin_length(force_change_pin=True)
        assert e.value.code == CtapError.ERR.PIN_NOT_SET
        client_pin = ClientPin(ctap, PinProtocolV2())
        client_pin.set_pin(PIN)
        with pytest.raises(CtapError) as e:
            Config(ctap).set_min_pin_length(force_change_pin=True)
        assert e.value.code == CtapError.ERR.PUAT_REQUIRED
        mc = client_pin.get_pin_token(PIN, ClientPin.PERMISSION.MAKE_CREDENTIAL, "example.com")
        with pytest.raises(CtapError) as e:
            Config(ctap, PinProtocolV2(), mc).set_min_pin_length(force_change_pin=True)
        assert e.value.code == CtapError.ERR.PIN_AUTH_INVALID
        config = Config(ctap, PinProtocolV2(), client_pin.get_pin_token(PIN, ClientPin.PERMISSION.AUTHENTICATOR_CFG))
        with pytest.raises(CtapError) as e:
            config.set_min_pin_length(min_pin_length=3)
        assert e.value.code == CtapError.ERR.PIN_POLICY_VIOLATION
        assert ctap.get_info().force_pin_change is False
        config.set_min_pin_length(min_pin_length=6, force_change_pin=True)
        info = ctap.get_info()
        assert info.force_pin_change is True and info.min_pin_length == 6
        with pytest.raises(CtapError) as e:
            client_pin.get_pin_token(PIN, ClientPin.PERMISSION.GET_ASSERTION, "example.com")
        assert e.value.code == CtapError.ERR.PIN_POLICY_VIOLATION
        env = {"TOKENBRIDGE_VIRTUAL_FIDO": key.sock}
        assert json.loads(tb_raw("fido2", "info", "--json", env=env).stdout)["forcePINChange"] is True
        client_pin.change_pin(PIN, "86420975")
        info = ctap.get_info()
        assert info.force_pin_change is False and info.min_pin_length == 6
        assert client_pin.get_pin_token("86420975", ClientPin.PERMISSION.GET_ASSERTION, "example.com")
    finally:
        key.stop()
