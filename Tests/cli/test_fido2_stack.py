"""TokenBridge's FIDO2 stack (libfido2 through our custom I/O: getInfo, tries, PIN protocols 1 and 2, PIN tokens,
setPIN/changePIN, makeCredential and getAssertion with hmac-secret) checked by code we did not write: python-fido2
reads the PIN tokenbridge set and computes the hmac-secret of the credential tokenbridge made, and the UAF key
derived from it must be the one tokenbridge registered. Each path runs against a CTAP 2.1 key and against a CTAP 2.0
one (protocol 1 only, no PIN token with permissions: libfido2 follows getInfo), and nothing spends a PIN try it
should not."""
import json
import sqlite3
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from fido2.ctap import CtapError
from fido2.ctap2.pin import ClientPin, PinProtocolV1, PinProtocolV2

from fido2_conn import Key
from test_uaf import home, rp, tb  # noqa: F401 (fixtures)

RP_ID = "tokenbridge.uaf"  # FIDO2Authenticator.rpID


@pytest.fixture(params=["ctap21", "ctap20"])
def key(request, tmp_path):
    k = Key(tmp_path, *(["--ctap20"] if request.param == "ctap20" else []))
    k.version = request.param
    yield k
    k.stop()


def record(home):
    [db] = Path(home["XDG_DATA_HOME"], "tokenbridge").glob("*.sqlite")
    with sqlite3.connect(db) as c:
        return c.execute("SELECT credentialID, hmacSalt, publicKey FROM authenticator WHERE state = 'registered'").fetchone()


def peer_hmac_secret(key, pin, credential_id, salt):
    """python-fido2's getAssertion with hmac-secret (its PIN protocol, its key agreement): the decrypted output."""
    ctap = key.ctap()
    proto = PinProtocolV2() if 2 in ctap.info.pin_uv_protocols else PinProtocolV1()
    client_pin = ClientPin(ctap, proto)
    token = client_pin.get_pin_token(pin, ClientPin.PERMISSION.GET_ASSERTION, RP_ID)
    key_agreement, shared = client_pin._get_shared_secret()
    salt_enc = proto.encrypt(shared, salt)
    hmac_input = {1: key_agreement, 2: salt_enc, 3: proto.authenticate(shared, salt_enc)}
    if proto.VERSION == 2:
        hmac_input[4] = 2
    cdh = bytes(32)
    res = ctap.get_assertion(RP_ID, cdh, [{"type": "public-key", "id": credential_id}],
                             extensions={"hmac-secret": hmac_input},
                             pin_uv_param=proto.authenticate(token, cdh), pin_uv_protocol=proto.VERSION)
    return proto.decrypt(shared, res.auth_data.extensions["hmac-secret"])


def uaf_public_key(output, salt):
    """FIDO2Authenticator.derivedKey: HKDF-SHA-256(output, salt, label ‖ counter) as a P-256 scalar."""
    for counter in range(4):
        k = HKDF(algorithm=hashes.SHA256(), length=32, salt=salt,
                 info=b"TokenBridge UAF P-256 key" + bytes([counter])).derive(output)
        n = int.from_bytes(k, "big")
        if 0 < n < 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551:
            return ec.derive_private_key(n, ec.SECP256R1()).public_key().public_bytes(
                Encoding.X962, PublicFormat.UncompressedPoint)


def test_python_fido2_reads_our_pin_and_derives_our_registered_key(key, home, rp):  # noqa: F811
    env = dict(home, TOKENBRIDGE_VIRTUAL_FIDO=key.sock)
    assert tb(env, "pin", "set", pins=["11111111"]).returncode == 0
    assert tb(env, "pin", "change", pins=["11111111", "22222222"]).returncode == 0
    ctap = key.ctap()
    assert ctap.info.options["clientPin"] is True
    proto = PinProtocolV2() if key.version == "ctap21" else PinProtocolV1()
    assert ctap.info.pin_uv_protocols == ([2, 1] if key.version == "ctap21" else [1])
    with pytest.raises(CtapError) as e:
        ClientPin(ctap, proto).get_pin_token("11111111")  # the old PIN no longer opens the key
    assert e.value.code == CtapError.ERR.PIN_INVALID
    ClientPin(key.ctap(), proto).get_pin_token("22222222")
    server = rp()
    r = tb(env, "register", "--username", "alice", "--server", server.url, pins=["22222222"])
    assert r.returncode == 0, r.stderr
    credential_id, salt, public_key = record(home)
    assert uaf_public_key(peer_hmac_secret(key, "22222222", credential_id, salt), salt) == public_key
    r = tb(env, "authenticate", "--username", "alice", "--server", server.url, pins=["22222222"])
    assert r.returncode == 0, r.stderr
    # Nothing above spent a try: the fallbacks (protocol 2, the PIN token with permissions) are refused before the
    # PIN is looked at, and one wrong PIN was python-fido2's, reset by the right one after it.
    assert ClientPin(key.ctap(), proto).get_pin_retries()[0] == 8


def test_a_wrong_pin_spends_one_try_and_the_next_attempt_agrees_a_new_key(key, home, rp):  # noqa: F811
    env = dict(home, TOKENBRIDGE_VIRTUAL_FIDO=key.sock)
    assert tb(env, "pin", "set", pins=["11111111"]).returncode == 0
    server = rp()
    assert tb(env, "register", "--username", "alice", "--server", server.url, pins=["11111111"]).returncode == 0
    # The key makes a new key-agreement key after a wrong PIN: the second attempt must agree again to succeed.
    r = tb(env, "authenticate", "--username", "alice", "--server", server.url, pins=["99999999", "11111111"])
    assert r.returncode == 0, r.stderr
    assert "7 tries left" in r.stderr, r.stderr  # read after the wrong PIN, shown before the second attempt
    proto = PinProtocolV2() if key.version == "ctap21" else PinProtocolV1()
    assert ClientPin(key.ctap(), proto).get_pin_retries()[0] == 8



def test_a_cool_down_another_command_began_sends_no_pin(tmp_path, home):  # noqa: F811
    """Three wrong PINs in a row leave the key taking no PIN until it is re-inserted. The next command knows it from
    what the earlier one learnt in the same plug-in (FIDO2CoolDown: libfido2 does not pass powerCycleState on) and
    waits for the re-insert sending no PIN: no key agreement, no PIN token, no changePIN reach the key (its own
    request log)."""
    key = Key(tmp_path, "--log-requests")
    env = dict(home, TOKENBRIDGE_VIRTUAL_FIDO=key.sock)

    def requests():
        with open(key.sock + ".log", errors="replace") as f:
            return [line.split("request ", 1)[1].strip() for line in f if "request cmd=" in line]

    try:
        assert tb(env, "pin", "set", pins=["1234"]).returncode == 0
        r = tb(env, "pin", "change", "--timeout", "1", pins=["0000", "5678", "0001", "5678", "0002", "5678"])
        assert r.returncode == 14 and "remove and re-insert" in r.stderr, r.stderr
        # The listing and `fido2 info` show the cool-down, as python-fido2 reads it (powerCycleState).
        assert ClientPin(key.ctap(), PinProtocolV2()).get_pin_retries() == (5, True)
        [listed] = json.loads(tb(env, "tokens", "--json").stdout)
        assert listed["pin"]["retriesLeft"] == 5 and listed["pin"]["powerCycleRequired"] is True, listed
        assert "5 tries left (of 8) (cooling down: remove and re-insert" in tb(env, "tokens").stdout
        info = json.loads(tb(env, "fido2", "info", "--json").stdout)
        assert info["pinRetries"] == 5 and info["powerCycleRequired"] is True, info
        assert "cooling down" in tb(env, "fido2", "info").stdout
        before = len(requests())
        r = tb(env, "pin", "change", "--timeout", "1", pins=["1234", "5678"])
        assert r.returncode == 14 and "remove and re-insert" in r.stderr, r.stderr
        sent = requests()[before:]
        assert "cmd=0x90 ctap=0x06 clientPIN=0x01" in sent, sent  # the tries (and the cool-down) were read
        assert not [s for s in sent if "clientPIN=0x01" not in s and "ctap=0x06" in s], sent
        key.replug()
        [listed] = json.loads(tb(env, "tokens", "--json").stdout)
        assert listed["pin"]["powerCycleRequired"] is False, listed  # re-inserted: PINs are taken again
        assert "cooling down" not in tb(env, "tokens").stdout
        assert tb(env, "pin", "change", pins=["1234", "5678"]).returncode == 0
        assert ClientPin(key.ctap(), PinProtocolV2()).get_pin_retries()[0] == 8
    finally:
        key.stop()
