"""tokenbridge fido2 reset with the virtual key (libfido2 custom I/O), the firmwares we did not write and the
reference RP; python-fido2 checks the virtual key's reset rules on its own.

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
from fido2_maintenance import (  # the fixtures (key, server) and helpers
    PIN, confirm_and_wait_for_replug, finish, home, key, key_id, key_state, local, register, restart, server, snapshot,
    spawn_reset, third_party_key_state)


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
