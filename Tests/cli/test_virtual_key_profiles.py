"""python-fido2 (not our code) against the virtual key's firmware profiles (`virtual-token fido2 --profile`):
the solo1-like key (CTAP 2.0 + FIDO_2_1_PRE, PIN protocol 1, no pinUvAuthToken, CTAP1_ERR_OTHER, no
powerCycleState, empty credential-management answers) is accepted as python-fido2 accepts solo1 itself, and its
credential management without credentials behaves as on solo1; the canokey-like key and --no-power-cycle-state
leave powerCycleState out. HardwareNotes.md names the firmware functions each behaviour was read from."""
import re

import pytest
from fido2.client import DefaultClientDataCollector, Fido2Client, UserInteraction
from fido2.ctap import CtapError
from fido2.ctap2 import Ctap2, CredentialManagement
from fido2.ctap2.extensions import HmacSecretExtension
from fido2.ctap2.pin import ClientPin, PinProtocolV1
from fido2.server import Fido2Server
from fido2.utils import websafe_decode
from fido2.webauthn import PublicKeyCredentialRpEntity, PublicKeyCredentialUserEntity

from test_fido2_peer import register_then_hmac_secret_twice
from fido2_conn import Key, open_device

ERR = CtapError.ERR


class PinUI(UserInteraction):
    def __init__(self, pin):
        self.pin = pin

    def request_pin(self, permissions, rp_id):
        return self.pin


@pytest.fixture
def solo1(tmp_path):
    k = Key(tmp_path, "--profile", "solo1", "--log-requests")
    yield k
    k.stop()


def pin_subcommands(key):
    """The clientPIN subcommands the key received (from its --log-requests log)."""
    with open(key.sock + ".log") as f:
        return [int(m, 16) for m in re.findall(r"clientPIN=0x([0-9a-f]{2})", f.read())]


def test_solo1_info_as_python_fido2_reads_it(solo1):
    info = solo1.ctap().info
    assert info.versions == ["U2F_V2", "FIDO_2_0", "FIDO_2_1_PRE"]
    assert "pinUvAuthToken" not in info.options and "credentialMgmtPreview" not in info.options
    assert info.options["credMgmt"] is True and info.options["clientPin"] is False
    assert info.pin_uv_protocols == [1]
    assert not ClientPin.is_token_supported(info) and CredentialManagement.is_supported(info)


def test_solo1_legacy_token_hmac_secret_and_assertion(solo1):
    """python-fido2's Fido2Client on the solo1-like key: PIN protocol 1, the PIN token by the legacy getPinToken
    (0x05, never 0x09), a credential with hmac-secret, assertions verified by python-fido2's server."""
    cp = ClientPin(solo1.ctap())
    assert isinstance(cp.protocol, PinProtocolV1)
    cp.set_pin("1234")
    dev = open_device(solo1.sock)
    client = Fido2Client(dev, DefaultClientDataCollector("https://example.com"), user_interaction=PinUI("1234"),
                         extensions=[HmacSecretExtension(allow_hmac_secret=True)])
    outputs = register_then_hmac_secret_twice(client)  # user verified with the legacy token
    assert outputs[0] == outputs[1] and len(websafe_decode(outputs[0])) == 32
    subs = pin_subcommands(solo1)
    assert 0x05 in subs and 0x09 not in subs


def test_solo1_refusals_and_retries_without_power_cycle_state(solo1):
    ctap = solo1.ctap()
    cp = ClientPin(ctap)
    cp.set_pin("1234")
    key_agreement, shared = cp._get_shared_secret()
    with pytest.raises(CtapError) as e:  # getPinUvAuthTokenUsingPinWithPermissions, as a CTAP 2.1 client asks
        ctap.client_pin(1, ClientPin.CMD.GET_TOKEN_USING_PIN, key_agreement=key_agreement,
                        pin_hash_enc=cp.protocol.encrypt(shared, bytes(16)), permissions=ClientPin.PERMISSION.GET_ASSERTION)
    assert e.value.code == ERR.OTHER
    with pytest.raises(CtapError) as e:
        cp.set_pin("5678")
    assert e.value.code == ERR.NOT_ALLOWED
    assert cp.get_pin_retries() == (8, None)  # no powerCycleState
    codes = []
    for _ in range(3):
        with pytest.raises(CtapError) as e:
            ClientPin(solo1.ctap()).get_pin_token("0000")
        codes.append(e.value.code)
    assert codes == [ERR.PIN_INVALID, ERR.PIN_INVALID, ERR.PIN_AUTH_BLOCKED]
    assert ClientPin(solo1.ctap()).get_pin_retries() == (5, None)  # the wait for a power cycle is not said
    with pytest.raises(CtapError) as e:  # the whole firmware waits for the power cycle, not only clientPIN
        Ctap2(open_device(solo1.sock)).get_assertion("example.com", bytes(32))
    assert e.value.code == ERR.PIN_AUTH_BLOCKED
    solo1.replug()
    assert len(ClientPin(solo1.ctap()).get_pin_token("1234")) == 16  # solo1's 16-byte token; the tries back to 8
    assert ClientPin(solo1.ctap()).get_pin_retries() == (8, None)


def test_solo1_credential_management_without_credentials(solo1):
    """As on solo1: getCredsMetadata answers 0 credentials, enumerateRPsBegin answers success with an empty body,
    and python-fido2's enumerate_rps() then fails with KeyError (it reads totalRPs from that empty answer), where a
    CTAP 2.1 key's NO_CREDENTIALS gives []. With a discoverable credential the enumeration works, the RP named by
    the user's name as solo1 does."""
    ctap = solo1.ctap()
    cp = ClientPin(ctap)
    cp.set_pin("1234")
    token = cp.get_pin_token("1234", ClientPin.PERMISSION.CREDENTIAL_MGMT)  # the legacy path: no permissions
    cm = CredentialManagement(ctap, cp.protocol, token)
    assert cm.get_metadata() == {1: 0, 2: 25}
    assert cm.enumerate_rps_begin() == {}
    with pytest.raises(KeyError):
        cm.enumerate_rps()
    assert pin_subcommands(solo1).count(0x09) == 0

    client = Fido2Client(open_device(solo1.sock), DefaultClientDataCollector("https://example.com"),
                         user_interaction=PinUI("1234"))
    server = Fido2Server(PublicKeyCredentialRpEntity(id="example.com", name="Example"))
    opts, state = server.register_begin(PublicKeyCredentialUserEntity(id=b"u1", name="alice"),
                                        resident_key_requirement="required", user_verification="required")
    server.register_complete(state, client.make_credential(opts.public_key))
    ctap = solo1.ctap()
    cp = ClientPin(ctap)
    cm = CredentialManagement(ctap, cp.protocol, cp.get_pin_token("1234"))
    [rp] = cm.enumerate_rps()
    assert rp[CredentialManagement.RESULT.RP] == {"id": "example.com", "name": "alice"}
    [cred] = cm.enumerate_creds(rp[CredentialManagement.RESULT.RP_ID_HASH])
    assert cred[CredentialManagement.RESULT.USER]["name"] == "alice"


def test_ctap21_credential_management_without_credentials(tmp_path):
    k = Key(tmp_path)
    try:
        ctap = k.ctap()
        cp = ClientPin(ctap)
        cp.set_pin("1234")
        cm = CredentialManagement(ctap, cp.protocol, cp.get_pin_token("1234", ClientPin.PERMISSION.CREDENTIAL_MGMT))
        assert cm.enumerate_rps() == []
    finally:
        k.stop()


@pytest.mark.parametrize("args", [["--profile", "canokey"], ["--no-power-cycle-state"],
                                  ["--profile", "ctap20", "--no-power-cycle-state"]])
def test_no_power_cycle_state(tmp_path, args):
    k = Key(tmp_path, *args)
    try:
        cp = ClientPin(k.ctap(), PinProtocolV1())
        cp.set_pin("1234")
        for _ in range(3):
            with pytest.raises(CtapError):
                ClientPin(k.ctap(), PinProtocolV1()).get_pin_token("0000")
        assert ClientPin(k.ctap(), PinProtocolV1()).get_pin_retries() == (5, None)
    finally:
        k.stop()


def test_ctap21_reports_power_cycle_state(tmp_path):
    k = Key(tmp_path)
    try:
        assert ClientPin(k.ctap()).get_pin_retries() == (8, False)
    finally:
        k.stop()


def test_unknown_profile_is_refused(tmp_path):
    import subprocess
    from conftest import VIRTUAL_TOKEN
    r = subprocess.run([VIRTUAL_TOKEN, "fido2", "--socket", str(tmp_path / "s"), "--state", str(tmp_path / "st"),
                        "--profile", "yubikey"], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "ctap21, ctap20, solo1, canokey" in r.stderr
