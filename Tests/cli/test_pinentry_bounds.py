"""A pinentry cannot make a command last for ever: one that keeps answering an empty PIN is asked a bounded number of
times and then the refusal ends the command; one that answers slowly, again and again, is bounded by --timeout over the
whole conversation (not per dialog); one that stops reading cannot block tokenbridge in a write: --timeout ends it, and
so does Ctrl-C (the pinentry is stopped, exit 3). The scripted pinentry's modes "always-empty" and "never-reads" play
those programs. The hang guards (`GUARD`) are far above every bound here; an old client that asks for ever runs into
them and fails."""
import json
import os
import signal
import subprocess
import time

from conftest import TOKENBRIDGE, pin_tries, tb
from test_pinentry import SCRIPTED, log_of

GUARD = 40


def scenario(tmp_path, **fields):
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(fields))
    env = {"PINENTRY_PROGRAM": SCRIPTED, "SCRIPTED_PINENTRY_SCENARIO": str(path),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_DATA_HOME": str(tmp_path / "data")}
    return env, path


def pinentry_pids(path):
    p = str(path) + ".pids"
    return [int(l) for l in open(p).read().split()] if os.path.exists(p) else []


def alive(pid):
    """Running (a zombie, ended but not yet reaped by its parent, counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def stop_leftovers(path):
    for pid in pinentry_pids(path):
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_pinentry_answering_empty_for_ever_is_asked_a_bounded_number_of_times(card, tmp_path):
    env, path = scenario(tmp_path, mode="always-empty")
    try:
        r = tb("pin", "change", "--timeout", "120", env=env, timeout=GUARD)
    finally:
        stop_leftovers(path)
    # The first round (current and new PIN) and five more after a refusal; then the refusal is the error, as with
    # --pin-fd.
    assert r.returncode == 9, r.stderr
    assert r.stderr == "tokenbridge: That PIN cannot be right: it is empty. Nothing was sent; no try was spent.\n"
    assert log_of(path).count("SETPROMPT Current PIN:") == 6
    assert pin_tries() == 3


def test_a_slow_empty_pinentry_is_bounded_by_the_timeout_over_all_dialogs(card, tmp_path):
    """Each dialog answers within its own SETTIMEOUT, but --timeout counts from the first dialog."""
    env, path = scenario(tmp_path, mode="always-empty", delay=1.0)
    start = time.monotonic()
    try:
        r = tb("pin", "change", "--timeout", "3", env=env, timeout=GUARD)
    finally:
        stop_leftovers(path)
    elapsed = time.monotonic() - start
    assert r.returncode == 14, r.stderr
    assert r.stderr == "tokenbridge: No answer within the time allowed; nothing was changed.\n"
    assert log_of(path).count("SETPROMPT Current PIN:") < 6  # the deadline ended it, not the count of re-asks
    assert elapsed < GUARD / 2, elapsed
    # Later dialogs are told what is left, not the whole --timeout again.
    timeouts = [int(l.split()[1]) for l in log_of(path) if l.startswith("SETTIMEOUT ")]
    assert timeouts[0] == 3 and all(t < 3 for t in timeouts[1:]) and len(timeouts) > 1, timeouts
    assert pin_tries() == 3


def test_a_pinentry_that_stops_reading_is_ended_by_the_timeout(card, tmp_path):
    env, path = scenario(tmp_path, mode="never-reads")
    try:
        r = tb("pin", "change", "--timeout", "2", env=env, timeout=GUARD)
        pids = pinentry_pids(path)
        assert r.returncode == 14, r.stderr
        assert r.stderr == "tokenbridge: No answer within the time allowed; nothing was changed.\n"
        assert len(pids) == 1 and not alive(pids[0]), pids
    finally:
        stop_leftovers(path)
    assert pin_tries() == 3


def test_ctrl_c_ends_a_pinentry_that_stops_reading(card, tmp_path):
    """The pinentry runs in another session (it never sees our Ctrl-C, as a graphical one would not): tokenbridge
    stops it itself after a short grace and ends as the user's cancel."""
    env, path = scenario(tmp_path, mode="never-reads")
    p = subprocess.Popen([TOKENBRIDGE, "pin", "change", "--timeout", "600"], env=dict(os.environ, **env),
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not pinentry_pids(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pinentry_pids(path), "the pinentry was never started"
        time.sleep(0.5)  # tokenbridge is now waiting to write to it
        os.kill(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=GUARD)
        assert p.returncode == 3, err
        assert err.endswith("tokenbridge: Cancelled; nothing was changed on the token.\n"), err
        assert not alive(pinentry_pids(path)[0])
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        stop_leftovers(path)
    assert pin_tries() == 3
