"""Durable intent before destruction: a `fido2 reset` killed after the key was erased (here: while the server stalls on
the deregistration that follows) left local registrations for credentials that no longer exist, and nothing ever
repaired them (633cbc3). Now the reset records its intent before the reset request; the next command asks the key (the
silent probe) whether the credentials are gone, deregisters and removes the registrations, and says so (plain text, and
one JSON line on stderr with --json). A key that is not there is reported, and nothing is decided until it is back."""
import json
import os
import re
import signal
import sqlite3
import time

import pexpect
import pytest

from conftest import TOKENBRIDGE, tb as tb_raw, wait_until
from fido2_conn import Key
from test_fido2_maintenance import PIN, confirm_and_wait_for_replug, home, key_id, key_state
from test_uaf import RelyingParty


@pytest.fixture
def key(tmp_path):
    k = Key(tmp_path)
    yield k
    k.stop()


@pytest.fixture
def server(tmp_path):
    s = RelyingParty(tmp_path)
    yield s
    s.stop()


def stored_registrations(tmp_path):
    """The local registrations as the database holds them, read without tokenbridge (whose start repairs)."""
    db = sqlite3.connect(tmp_path / "d" / "tokenbridge" / "tokenbridge.sqlite")
    try:
        return sorted(r[0] for r in db.execute("SELECT username FROM authenticator"))
    finally:
        db.close()


def killed_reset(key, server, tmp_path, users):
    """Registers `users`, then runs `fido2 reset` and kills it with SIGKILL once the key is erased, while the
    server stalls on the deregistration that follows."""
    env = home(key, tmp_path)
    assert tb_raw("pin", "set", env=env, pins=[PIN]).returncode == 0
    for u in users:
        r = tb_raw("register", "--username", u, "--server", server.url, env=env, pins=[PIN])
        assert r.returncode == 0, r.stderr
    assert len(server.registrations()) == len(users)
    server.fault(status=500, delay=20)  # the next server request (the reset's deregistration) stalls
    child = pexpect.spawn(TOKENBRIDGE, ["fido2", "reset"], env=dict(os.environ, **env), encoding="utf-8",
                          timeout=30)
    try:
        confirm_and_wait_for_replug(child, key, users)
        key.replug()
        wait_until(lambda: key_state(key)["credentials"] == [] and key_state(key)["pin"] is None, "the key erased")
        time.sleep(0.3)  # the reset's answer is in; the run waits for the server
        assert child.isalive()
        child.kill(signal.SIGKILL)
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.signalstatus == signal.SIGKILL
    # What the kill left: registrations for credentials the key no longer has.
    assert stored_registrations(tmp_path) == sorted(users)
    assert len(server.registrations()) == len(users)


def test_interrupted_reset_is_finished_by_the_next_command(key, server, tmp_path):
    killed_reset(key, server, tmp_path, ["alice", "bob"])
    r = tb_raw("accounts", env=home(key, tmp_path))
    assert r.returncode == 0, r.stderr
    assert re.search(rf"An interrupted fido2 reset of {re.escape(key_id(key))} was finished: 2 local "
                     r"registration\(s\) whose key is gone from the token were removed", r.stderr), r.stderr
    assert re.search(r"alice at http://127\.0\.0\.1:\d+: deregistered at the server and removed here", r.stderr)
    assert re.search(r"bob at http://127\.0\.0\.1:\d+: deregistered at the server and removed here", r.stderr)
    assert r.stdout.strip() == "No accounts."
    assert stored_registrations(tmp_path) == [] and server.registrations() == []
    # Finished once: the next command has nothing to say.
    r = tb_raw("device", "check", env=home(key, tmp_path))
    assert "interrupted" not in r.stderr
    # And the same flow works again on the reset key.
    assert tb_raw("pin", "set", env=home(key, tmp_path), pins=[PIN]).returncode == 0
    r = tb_raw("register", "--username", "alice", "--server", server.url, env=home(key, tmp_path), pins=[PIN])
    assert r.returncode == 0, r.stderr


def test_interrupted_reset_json_notice(key, server, tmp_path):
    killed_reset(key, server, tmp_path, ["alice"])
    r = tb_raw("accounts", "--json", env=home(key, tmp_path))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == []
    notices = [json.loads(line) for line in r.stderr.splitlines() if line.startswith("{")]
    assert len(notices) == 1, r.stderr
    [o] = notices[0]["interruptedOperations"]
    assert o["operation"] == "fido2-reset" and o["token"] == key_id(key) and o["result"] == "finished"
    assert [(x["username"], "serverFailure" in x) for x in o["removed"]] == [("alice", False)]
    assert o["kept"] == []


def test_key_absent_is_reported_and_finished_when_it_is_back(key, server, tmp_path):
    killed_reset(key, server, tmp_path, ["alice"])
    env = dict(home(key, tmp_path), TOKENBRIDGE_VIRTUAL_FIDO=str(tmp_path / "nothing-here.sock"))
    r = tb_raw("accounts", env=env)
    assert re.search(rf"An interrupted fido2 reset of {re.escape(key_id(key))} could not be checked: the token is "
                     r"not here", r.stderr), r.stderr
    assert stored_registrations(tmp_path) == ["alice"]  # nothing decided without the key
    r = tb_raw("accounts", env=home(key, tmp_path))
    assert "was finished: 1 local registration(s)" in r.stderr, r.stderr
    assert stored_registrations(tmp_path) == [] and server.registrations() == []


def test_reset_that_did_not_happen_keeps_the_registrations(key, server, tmp_path):
    """Killed after the intent was recorded but before the key acted (no touch yet): the next command finds the
    credentials still on the key and keeps every registration."""
    env = home(key, tmp_path)
    assert tb_raw("pin", "set", env=env, pins=[PIN]).returncode == 0
    r = tb_raw("register", "--username", "alice", "--server", server.url, env=env, pins=[PIN])
    assert r.returncode == 0, r.stderr
    key.stop()
    key.args = ("--presence", "wait")  # the reset waits for a touch that never comes
    key.start()
    child = pexpect.spawn(TOKENBRIDGE, ["fido2", "reset"], env=dict(os.environ, **env), encoding="utf-8",
                          timeout=30)
    try:
        confirm_and_wait_for_replug(child, key, ["alice"])
        key.replug()
        child.expect(re.escape(f"Touch your key ({key_id(key)}) to reset it."))
        child.kill(signal.SIGKILL)
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    key.stop()
    key.args = ()
    key.start()
    r = tb_raw("accounts", env=env)
    assert "was finished: no local registration lost its key" in r.stderr, r.stderr
    assert "1 registration(s) still have their key on the token: kept" in r.stderr
    assert stored_registrations(tmp_path) == ["alice"] and len(server.registrations()) == 1
    r = tb_raw("authenticate", "--username", "alice", "--server", server.url, env=env, pins=[PIN])
    assert r.returncode == 0, r.stderr
