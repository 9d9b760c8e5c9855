"""`tokenbridge provision` on FIDO2 firmware we did not write (Tools/third-party: solo1, CanoKey) and on the simulator
with a firmware profile that leaves authenticatorConfig out. A key given a fresh PIN is asked to refuse it until it is
changed only when its getInfo offers authnrCfg and setMinPINLength (CTAP 2.1 §6.11.4); these keys offer neither, so
the row is done with a note that says the PIN could not be forced, and the sealed PIN signs in as it is. What the key
answers decides it: the expectation below is read from the key's own getInfo through python-fido2."""
import json
import subprocess

import pytest
from fido2.ctap2.pin import ClientPin

from conftest import tb
from implementations import pin_protocol
from relying_party import RelyingParty
from test_fido2_interop import firmware_key, firmware_keys  # noqa: F401 (a fixture and its parameters)


def key_state(key):
    """The key's getInfo and PIN tries, through python-fido2 on a connection of its own (closed before tokenbridge
    connects)."""
    ctap = key.ctap()
    try:
        info = ctap.get_info()
        tries = ClientPin(ctap, pin_protocol(ctap)).get_pin_retries()[0] if info.options.get("clientPin") else None
        return info, tries
    finally:
        ctap.device.close()


def forcible(info):
    """What CTAP 2.1 §6.11.4 asks of a key that takes setMinPINLength: both options present and true."""
    return info.options.get("authnrCfg") is True and info.options.get("setMinPINLength") is True


@pytest.mark.parametrize("firmware_key", firmware_keys(("--profile", "solo1")), indirect=True)
def test_a_key_without_authenticator_config_is_provisioned_with_a_note_and_its_sealed_pin_signs_in(
        firmware_key, tmp_path):
    key = firmware_key
    info, _ = key_state(key)
    assert not forcible(info), info.options  # the premise of this test, from the key itself
    assert info.options.get("clientPin") is False, info.options  # factory state: no PIN yet
    env = {"TOKENBRIDGE_VIRTUAL_FIDO": key.sock, "XDG_DATA_HOME": str(tmp_path / "d"),
           "XDG_CONFIG_HOME": str(tmp_path / "c")}
    [token] = json.loads(tb("tokens", "--json", env=env).stdout)
    subprocess.run(["age-keygen", "-o", str(tmp_path / "identity.txt")], check=True, capture_output=True)
    recipient = subprocess.run(["age-keygen", "-y", str(tmp_path / "identity.txt")], check=True,
                               capture_output=True, text=True).stdout.strip()
    (tmp_path / "plan.csv").write_text("username\nalice\n")
    server = RelyingParty(tmp_path)
    try:
        r = tb("provision", "--plan", str(tmp_path / "plan.csv"), "--journal", str(tmp_path / "journal.sqlite"),
               "--report", str(tmp_path / "report.json"), "--pin-recipient", recipient, "--server", server.url,
               env=env, timeout=120)
        assert r.returncode == 0, (r.stdout, r.stderr)
        [row] = json.loads((tmp_path / "report.json").read_text())["rows"]
        assert (row["username"], row["kind"], row["status"], row["error"]) == ("alice", "fido2", "done", None), row
        assert row["serial"] == token["id"]  # a key's serial in the report is its id
        assert row["note"] == (
            "The key cannot be made to refuse this PIN until it is changed (no authenticatorConfig): ask the user to "
            "change it at first use (tokenbridge pin change).")
        assert [(g["username"], g["keyID"]) for g in server.registrations()] == [("alice", row["keyID"])]
        opened = subprocess.run(["age", "-d", "-i", str(tmp_path / "identity.txt")], input=row["sealedPin"],
                                capture_output=True, text=True, timeout=30)
        assert opened.returncode == 0, opened.stderr
        pin = opened.stdout.strip()
        assert pin.isdigit() and len(pin) >= 8
        assert pin not in r.stdout + r.stderr + (tmp_path / "report.json").read_text()
        # The key now has that PIN with its tries full, and takes it at once (no forced change).
        info, tries = key_state(key)
        assert info.options.get("clientPin") is True and not info.force_pin_change, info
        assert tries == 8
        a = tb("authenticate", "--username", "alice", "--token", token["id"], "--server", server.url, env=env,
               pins=[pin])
        assert a.returncode == 0, (a.stdout, a.stderr)
    finally:
        server.stop()
