"""What the fido2 info, credentials and reset tests share: the key (each FIDO2 implementation), the reference RP,
the key's state as a reset would change it, local data, and the reset's dialog driven through pexpect."""
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
