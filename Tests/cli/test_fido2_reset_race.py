"""A touch that comes as soon as `fido2 reset` shows its touch cue is never lost, nor turned into a cancel.

The sequence, 20 times: the virtual key waits for a real touch (--presence wait); a registration whose credential is on
the key; `tokenbridge fido2 reset` on a terminal; the key id typed in full; the key replugged when asked (the simulator
stopped and started on the same state, or SIGUSR1: both, in turns); SIGUSR2 (the touch) the moment "Touch your key (…)
to reset it." appears. Every run must end with the key reset (exit 0).

Meanwhile another program holds the key open, as a browser or a desktop service does that looked at the key when it
came back, and lets go of it right after the touch. On a real key that changes nothing: closing a hidraw descriptor
sends the key nothing, and CTAPHID_CANCEL only ends the request of the channel it comes on (CTAP 2.1 §11.2.9.1.5).
The simulator on main at 633cbc3 took any connection's end (and a CANCEL on any channel) as a cancel of whatever
request waited for a touch, so the reset ended "Cancelled; nothing was done." (exit 3)."""
import os
import re
import signal

import pexpect
import pytest

from conftest import TOKENBRIDGE, tb as tb_raw
from fido2_conn import Key, open_device
from test_fido2_maintenance import PIN, home, key_id, key_state, local, restart
from test_uaf import RelyingParty

RUNS = 20


@pytest.fixture
def server(tmp_path):
    s = RelyingParty(tmp_path)
    yield s
    s.stop()


def one_reset(run_dir, server, user, by_restart):
    """One run of the reset sequence on a key of its own; returns (exit status, the command's last words)."""
    key = Key(run_dir)  # touched at once: the registration needs a touch too
    other = None
    try:
        env = home(key, run_dir)
        assert tb_raw("pin", "set", env=env, pins=[PIN]).returncode == 0
        r = tb_raw("register", "--username", user, "--server", server.url, env=env, pins=[PIN])
        assert r.returncode == 0, r.stderr
        assert key_state(key)["credentials"] != []
        restart(key, "--presence", "wait")  # from here on only SIGUSR2 touches it
        child = pexpect.spawn(TOKENBRIDGE, ["fido2", "reset"], env=dict(os.environ, **env), encoding="utf-8",
                              timeout=20)
        try:
            child.expect(re.escape(f"type the key id ({key_id(key)}): "))
            child.sendline(key_id(key))
            child.expect("Remove the key")
            if by_restart:
                restart(key, "--presence", "wait")
            else:
                key.replug()
            other = open_device(key.sock)  # another program opens the key that came back (CTAPHID_INIT)
            child.expect(re.escape(f"Touch your key ({key_id(key)}) to reset it."))
            key.proc.send_signal(signal.SIGUSR2)
            other.close()  # ... and lets go of it
            other = None
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
        if child.exitstatus == 0:
            state = key_state(key)
            assert state["credentials"] == [] and state["pin"] is None and local(key, run_dir) == []
        return child.exitstatus, child.before.strip().splitlines()[-1:]
    finally:
        if other is not None:
            other.close()
        key.stop()


def test_quick_touch_after_the_cue_resets_every_time(tmp_path, server):
    failures = []
    for i in range(RUNS):
        run_dir = tmp_path / f"r{i}"
        run_dir.mkdir()
        status, last = one_reset(run_dir, server, f"user{i}", by_restart=i % 2 == 0)
        if status != 0:
            failures.append((i, status, last))
    assert not failures, f"{len(failures)} of {RUNS} resets failed: {failures}"
