"""The FIDO2 findings of the first firmwares we did not write, kept as fast tests on the virtual key's firmware profiles
(`virtual-token fido2 --profile solo1|canokey`, `--no-power-cycle-state`; HardwareNotes.md, "virtual-token fido2:
firmware profiles"). Each failed on 633cbc3, where the client spoke CTAP2 of its own:
- solo1 (CTAP 2.0 + FIDO_2_1_PRE, PIN protocol 1, no `pinUvAuthToken`): authentication asked for a PIN token with
  permissions (clientPIN 0x09) that the key never offered, and failed on its CTAP1_ERR_OTHER;
- with resident keys, registration failed the same way after makeCredential and left a discoverable credential;
- `fido2 credentials` on a key without resident credentials failed on its empty (success) answer;
- keys that leave out getPINRetries' powerCycleState: after three wrong PINs the cool-down was not shown, and the
  next PIN command sent the PIN.
The same flows run on the real firmwares in Tests/cli (third-party implementations) and in the lab; the tests below
that make sense on real firmware take the implementation as a parameter ("virtual" is then the simulator with the
firmware profile of the finding)."""
import json

import pytest

from conftest import tb as tb_raw
from fido2_conn import Key
from implementations import FIDO2_IMPLEMENTATIONS, make_key, pin_protocol
from test_uaf import RelyingParty

PIN = "12345678"


def requests(key):
    with open(key.sock + ".log", errors="replace") as f:
        return [line.split("request ", 1)[1].strip() for line in f if "request cmd=" in line]


@pytest.fixture
def env(tmp_path):
    def make(key, resident=False):
        cfg = tmp_path / "c" / "tokenbridge"
        cfg.mkdir(parents=True, exist_ok=True)
        (cfg / "config.json").write_text(json.dumps({"fido2ResidentKeys": resident}))
        return {"TOKENBRIDGE_VIRTUAL_FIDO": key.sock, "XDG_DATA_HOME": str(tmp_path / "d"),
                "XDG_CONFIG_HOME": str(tmp_path / "c")}
    return make


@pytest.fixture
def server(tmp_path):
    s = RelyingParty(tmp_path)
    yield s
    s.stop()


@pytest.mark.parametrize("profile", ["solo1", "canokey"])
@pytest.mark.parametrize("resident", [False, True])
def test_register_authenticate_deregister(tmp_path, env, server, profile, resident):
    key = Key(tmp_path, "--profile", profile, "--log-requests")
    try:
        e = env(key, resident)
        assert tb_raw("pin", "set", env=e, pins=[PIN]).returncode == 0
        r = tb_raw("register", "--username", "alice", "--server", server.url, env=e, pins=[PIN])
        assert r.returncode == 0, r.stderr
        for _ in range(2):
            r = tb_raw("authenticate", "--username", "alice", "--server", server.url, env=e, pins=[PIN])
            assert r.returncode == 0, r.stderr
        if profile == "solo1":
            # The PIN token the key offers: the legacy getPinToken (0x05), never the CTAP 2.1 one (0x09).
            sent = requests(key)
            assert any("clientPIN=0x05" in s for s in sent), sent
            assert not any("clientPIN=0x09" in s for s in sent), sent
        creds = tb_raw("fido2", "credentials", "--json", env=e, pins=[PIN])
        assert creds.returncode == 0, creds.stderr
        assert len(json.loads(creds.stdout)) == (1 if resident else 0), creds.stdout
        r = tb_raw("deregister", "--username", "alice", "--server", server.url, env=e)
        assert r.returncode == 0, r.stderr
    finally:
        key.stop()


@pytest.mark.parametrize("profile", ["ctap21", "solo1"])
def test_a_failed_resident_registration_leaves_no_credential(tmp_path, env, server, profile):
    """The key makes the discoverable credential, then the assertion that derives the UAF key does not happen (here:
    Ctrl-C while the key waits for the second touch; on solo1 at 633cbc3 it was the key's refusal of the PIN token):
    the credential made a moment before is deleted again, so `fido2 credentials` does not list a stray one."""
    import os
    import signal
    import time

    import pexpect
    from conftest import TOKENBRIDGE

    key = Key(tmp_path, "--profile", profile, "--presence", "wait")
    try:
        e = env(key, resident=True)
        assert tb_raw("pin", "set", env=e, pins=[PIN]).returncode == 0
        child = pexpect.spawn(TOKENBRIDGE, ["register", "--username", "alice", "--server", server.url],
                              env=dict(os.environ, **e), encoding="utf-8", timeout=30)
        child.expect("PIN to register alice")
        child.sendline(PIN)
        child.expect("Touch your key")  # makeCredential
        time.sleep(0.2)
        key.proc.send_signal(signal.SIGUSR2)
        child.expect("Touch your key")  # getAssertion for the hmac-secret output
        child.sendintr()
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 3, child.before
        assert server.registrations() == []
        r = tb_raw("fido2", "credentials", "--json", env=e, pins=[PIN])
        assert r.returncode == 0 and json.loads(r.stdout) == [], (r.returncode, r.stdout, r.stderr)
    finally:
        key.stop()


def firmware_keys(*profiles):
    """Parameters of `firmware_key`: the simulator with each of `profiles` (virtual-token options: the finding's
    firmware profile), then each third-party firmware."""
    return ([pytest.param(("virtual", p), id="virtual-" + "-".join(a.strip("-") for a in p if a != "--log-requests"))
             for p in profiles] + [pytest.param((i, ()), id=i) for i in FIDO2_IMPLEMENTATIONS if i != "virtual"])


@pytest.fixture
def firmware_key(tmp_path, request):
    impl, args = request.param
    if impl != "virtual":
        request.getfixturevalue("third_party_built")
    k = make_key(impl, tmp_path, *args)
    yield k
    k.stop()


@pytest.mark.parametrize("firmware_key", firmware_keys(("--profile", "solo1")), indirect=True)
def test_credentials_on_a_key_without_any(firmware_key, env):
    """solo1 answers enumerateRPs with success and an empty body when it holds no resident credential; the others
    answer NO_CREDENTIALS or a count of 0. Each is an empty list."""
    e = env(firmware_key)
    assert tb_raw("pin", "set", env=e, pins=[PIN]).returncode == 0
    r = tb_raw("fido2", "credentials", "--json", env=e, pins=[PIN])
    assert r.returncode == 0 and json.loads(r.stdout) == [], (r.returncode, r.stdout, r.stderr)
    r = tb_raw("fido2", "credentials", env=e, pins=[PIN])
    assert r.returncode == 0 and "No discoverable credentials" in r.stdout, (r.stdout, r.stderr)


@pytest.mark.parametrize("firmware_key", firmware_keys(*[(*p, "--log-requests") for p in [
    ("--profile", "solo1"), ("--profile", "canokey"), ("--no-power-cycle-state",)]]), indirect=True)
def test_cool_down_without_power_cycle_state(firmware_key, env):
    """Three wrong PINs in a row: the key takes no PIN until re-inserted and does not say so in getPINRetries (solo1
    and CanoKey leave powerCycleState out). What tokenbridge's own attempts learnt is shown (`tokens`, `pin status`,
    `fido2 info`) and the next PIN command sends no PIN (the simulator's request log shows it; on real firmware the
    PIN command's own answer does); after a replug PINs are taken again."""
    key = firmware_key
    simulated = key.impl == "virtual"
    e = env(key)
    assert tb_raw("pin", "set", env=e, pins=[PIN]).returncode == 0
    r = tb_raw("pin", "change", "--timeout", "1", env=e,
               pins=["00000000", "87654321", "00000001", "87654321", "00000002", "87654321"])
    assert r.returncode == 14 and "remove and re-insert" in r.stderr, (r.returncode, r.stderr)
    [listed] = json.loads(tb_raw("tokens", "--json", env=e).stdout)
    assert listed["pin"]["retriesLeft"] == 5 and listed["pin"]["powerCycleRequired"] is True, listed
    assert "cooling down" in tb_raw("tokens", env=e).stdout
    assert "cooling down" in tb_raw("pin", "status", env=e).stdout
    info = json.loads(tb_raw("fido2", "info", "--json", env=e).stdout)
    assert info["powerCycleRequired"] is True, info
    before = len(requests(key)) if simulated else 0
    r = tb_raw("pin", "change", "--timeout", "1", env=e, pins=[PIN, "87654321"])
    assert r.returncode == 14 and "remove and re-insert" in r.stderr, (r.returncode, r.stderr)
    if simulated:
        sent = requests(key)[before:]
        # The tries were read; no other clientPIN subcommand (key agreement, PIN token, changePIN) reached the key.
        assert [s for s in sent if "ctap=0x06" in s] and all("clientPIN=0x01" in s for s in sent if "ctap=0x06" in s), \
            sent
    # Nothing was spent while it waited: the key still counts 5 (a PIN sent to a cooling-down key is refused
    # without counting, so this alone would not tell; the request log above does, on the simulator).
    key.replug()
    [listed] = json.loads(tb_raw("tokens", "--json", env=e).stdout)
    assert listed["pin"]["powerCycleRequired"] is False and listed["pin"]["retriesLeft"] == 5, listed
    r = tb_raw("pin", "change", env=e, pins=[PIN, "87654321"])
    assert r.returncode == 0, r.stderr
    from fido2.ctap2.pin import ClientPin
    ctap = key.ctap()
    assert ClientPin(ctap, pin_protocol(ctap)).get_pin_retries()[0] == 8  # the new PIN worked: 8 again


@pytest.mark.parametrize("firmware_key", firmware_keys(("--no-power-cycle-state",)), indirect=True)
def test_a_cool_down_seen_growing_from_another_program_is_known(firmware_key, env):
    """Another program (python-fido2, with the key's own PIN protocol) spends three tries in a row after
    tokenbridge last read them, in the same plug-in: the drop of the tries tells the cool-down (a correct PIN
    between would have put them back to 8 first)."""
    from fido2.ctap import CtapError
    from fido2.ctap2.pin import ClientPin

    key = firmware_key
    e = env(key)
    assert tb_raw("pin", "set", env=e, pins=[PIN]).returncode == 0
    [listed] = json.loads(tb_raw("tokens", "--json", env=e).stdout)
    assert listed["pin"]["retriesLeft"] == 8 and listed["pin"]["powerCycleRequired"] is False, listed
    ctap = key.ctap()
    cp = ClientPin(ctap, pin_protocol(ctap))
    for wrong in ("0000", "0001", "0002"):
        with pytest.raises(CtapError):
            cp.get_pin_token(wrong)
    [listed] = json.loads(tb_raw("tokens", "--json", env=e).stdout)
    assert listed["pin"]["retriesLeft"] == 5 and listed["pin"]["powerCycleRequired"] is True, listed
    assert "cooling down" in tb_raw("pin", "status", env=e).stdout
