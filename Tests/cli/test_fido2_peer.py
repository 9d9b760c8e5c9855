"""python-fido2 (not our code) drives the virtual CTAP 2.1 key: getInfo, PIN set/change, retries, the
3-failures power-cycle rule, makeCredential/getAssertion verified by python-fido2's server, hmac-secret."""
import os
import signal
import socket
import subprocess
import time

import pytest
from fido2.client import DefaultClientDataCollector, Fido2Client, UserInteraction
from fido2.ctap import CtapError
from fido2.ctap2 import Ctap2
from fido2.ctap2.extensions import HmacSecretExtension
from fido2.ctap2.pin import ClientPin, PinProtocolV1, PinProtocolV2
from fido2.server import Fido2Server
from fido2.webauthn import PublicKeyCredentialRpEntity, PublicKeyCredentialUserEntity

from conftest import VIRTUAL_TOKEN, wait_until
from fido2_conn import Key, open_device

ERR = CtapError.ERR


@pytest.fixture
def key(tmp_path):
    k = Key(tmp_path)
    yield k
    k.stop()


class PinUI(UserInteraction):
    def __init__(self, pin):
        self.pin = pin

    def request_pin(self, permissions, rp_id):
        return self.pin


def test_get_info(key):
    info = key.ctap().info
    assert "FIDO_2_1" in info.versions and "hmac-secret" in info.extensions
    assert info.options["clientPin"] is False and info.pin_uv_protocols == [2, 1]
    assert info.min_pin_length == 4


@pytest.mark.parametrize("protocol", [PinProtocolV1, PinProtocolV2])
def test_set_change_and_wrong_pins(key, protocol):
    c = key.ctap()
    cp = ClientPin(c, protocol())
    cp.set_pin("1234")
    assert Ctap2(open_device(key.sock)).info.options["clientPin"] is True
    assert cp.get_pin_retries()[0] == 8
    with pytest.raises(CtapError) as e:
        cp.set_pin("5678")  # already set
    assert e.value.code == ERR.PIN_AUTH_INVALID
    cp.change_pin("1234", "pässwörd")
    with pytest.raises(CtapError) as e:
        cp.get_pin_token("1234")
    assert e.value.code == ERR.PIN_INVALID
    assert cp.get_pin_retries()[0] == 7
    assert len(cp.get_pin_token("pässwörd")) == 32
    assert cp.get_pin_retries()[0] == 8


def raw_set_pin(cp, pin_bytes):
    """setPIN without python-fido2's own length check, so the key's check is what is tested."""
    key_agreement, shared = cp._get_shared_secret()
    enc = cp.protocol.encrypt(shared, pin_bytes.ljust(64, b"\0"))
    cp.ctap.client_pin(cp.protocol.VERSION, ClientPin.CMD.SET_PIN, key_agreement=key_agreement, new_pin_enc=enc,
                       pin_uv_param=cp.protocol.authenticate(shared, enc))


def test_pin_policy(key):
    cp = ClientPin(key.ctap(), PinProtocolV2())
    for bad in [b"123", "äöü".encode(), b"\xff\xfe\xfd\xfc"]:  # too few code points; not UTF-8
        with pytest.raises(CtapError) as e:
            raw_set_pin(cp, bad)
        assert e.value.code == ERR.PIN_POLICY_VIOLATION
    raw_set_pin(cp, "äöü€".encode())  # 4 code points, 11 bytes
    assert cp.get_pin_retries()[0] == 8


def test_three_wrong_pins_need_a_replug(key):
    cp = ClientPin(key.ctap(), PinProtocolV2())
    cp.set_pin("1234")
    codes = []
    for _ in range(4):
        try:
            cp.get_pin_token("0000")
        except CtapError as e:
            codes.append(e.value.code if hasattr(e, "value") else e.code)
    assert codes == [ERR.PIN_INVALID, ERR.PIN_INVALID, ERR.PIN_AUTH_BLOCKED, ERR.PIN_AUTH_BLOCKED]
    assert cp.get_pin_retries() == (5, True)  # the 4th try was not counted; power cycle needed
    with pytest.raises(CtapError) as e:
        cp.get_pin_token("1234")  # even the right PIN, until replug
    assert e.value.code == ERR.PIN_AUTH_BLOCKED
    key.replug()
    cp = ClientPin(key.ctap(), PinProtocolV2())
    assert cp.get_pin_retries() == (5, False)
    assert len(cp.get_pin_token("1234")) == 32
    assert cp.get_pin_retries()[0] == 8


@pytest.mark.parametrize("protocol", [1, 2])
def test_make_credential_and_assertion_verified_by_python_fido2_server(key, protocol):
    ClientPin(key.ctap(), PinProtocolV2()).set_pin("1234")
    dev = open_device(key.sock)
    ctap = Ctap2(dev)
    client = Fido2Client(dev, DefaultClientDataCollector("https://example.com"), user_interaction=PinUI("1234"),
                         extensions=[HmacSecretExtension(allow_hmac_secret=True)])
    if protocol == 1:  # force protocol 1 by hiding 2 from the client
        ctap.info.pin_uv_protocols[:] = [1]
    outputs = register_then_hmac_secret_twice(client)
    assert outputs[0] == outputs[1]  # hmac-secret is stable for a salt


def test_presence_denied(tmp_path):
    k = Key(tmp_path, "--presence", "deny")
    try:
        client = Fido2Client(open_device(k.sock), DefaultClientDataCollector("https://example.com"))
        server = Fido2Server(PublicKeyCredentialRpEntity(id="example.com", name="Example"))
        opts, _ = server.register_begin(PublicKeyCredentialUserEntity(id=b"u1", name="a"), user_verification="discouraged")
        with pytest.raises(Exception) as e:
            client.make_credential(opts.public_key)
        assert "OPERATION_DENIED" in repr(e.value) or "DEVICE_INELIGIBLE" in repr(e.value) or "0x27" in repr(e.value)
    finally:
        k.stop()


def test_reset_only_right_after_replug(tmp_path):
    k = Key(tmp_path, "--reset-window", "1")
    try:
        ClientPin(k.ctap(), PinProtocolV2()).set_pin("1234")
        time.sleep(1.5)
        with pytest.raises(CtapError) as e:
            k.ctap().reset()
        assert e.value.code == ERR.NOT_ALLOWED
        k.replug()
        k.ctap().reset()
        assert k.ctap().info.options["clientPin"] is False
    finally:
        k.stop()


def test_state_survives_a_restart(key):
    ClientPin(key.ctap(), PinProtocolV2()).set_pin("1234")
    key.stop()
    if os.path.exists(key.sock):
        os.unlink(key.sock)
    key.start()
    assert key.ctap().info.options["clientPin"] is True
    assert os.stat(key.state).st_mode & 0o777 == 0o600


def test_malformed_frames_and_cbor_never_crash_it(key):
    import random
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(key.sock)
    s.settimeout(0.005)
    rnd = random.Random(7)
    for _ in range(300):
        s.send(bytes(rnd.getrandbits(8) for _ in range(rnd.choice([1, 10, 63, 64, 65, 100]))))
        try:
            s.recv(64)
        except socket.timeout:
            pass
    s.close()
    c = key.ctap()  # still answers INIT and getInfo
    assert "FIDO_2_1" in c.info.versions
    dev = open_device(key.sock)
    for body in [b"\x04\xff", b"\x06\xa1\x02", b"\x01\xa0", b"\x06" + b"\x9f" * 40, b"\x2a"]:
        r = dev.call(0x10, body)  # CTAPHID_CBOR
        assert r[0] != 0  # an error status, not a crash
    assert "FIDO_2_1" in key.ctap().info.versions


def register_then_hmac_secret_twice(client):
    """A credential with hmac-secret made with user verification and checked by python-fido2's server, then
    `hmac_secret_twice` with it."""
    server = Fido2Server(PublicKeyCredentialRpEntity(id="example.com", name="Example"))
    opts, state = server.register_begin(PublicKeyCredentialUserEntity(id=b"u1", name="alice"),
                                        user_verification="required")
    reg = client.make_credential({**dict(opts.public_key), "extensions": {"hmacCreateSecret": True}})
    assert reg.client_extension_results == {"hmacCreateSecret": True}
    cred = server.register_complete(state, reg)
    assert cred.flags & 0x04  # user verified (the PIN token)
    return hmac_secret_twice(client, server, cred)


def hmac_secret_twice(client, server, cred):
    """Two assertions with the same hmac-secret salt, each verified by python-fido2's server: their outputs."""
    salt = os.urandom(32)
    outputs = []
    for _ in range(2):
        opts, state = server.authenticate_begin([cred.credential_data], user_verification="required")
        res = client.get_assertion({**dict(opts.public_key), "extensions": {"hmacGetSecret": {"salt1": salt}}})
        response = res.get_response(0)
        server.authenticate_complete(state, [cred.credential_data], response)
        outputs.append(response.client_extension_results["hmacGetSecret"]["output1"])
    return outputs
