"""A pcscd that runs but does not answer (stopped with SIGSTOP: it keeps its socket, accepts nothing further) must not
hang `doctor`, `tokens` or `tokens --wait --timeout`: each ends with "pcscd does not answer" and its exit status; after
SIGCONT everything works again. The private pcscd of Tools/with-pcscd is the one stopped (TB_PCSCD_PID). The subprocess
timeout is a hang guard, far above tokenbridge's 5 s answer deadline."""
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import TOKENBRIDGE, tb
from test_watch import Watch

GUARD = 30
MESSAGE = ("tokenbridge: The PC/SC service (pcscd) does not answer: it runs but is stopped or hung. Restart it "
           "(sudo systemctl restart pcscd) and try again.\n")


@pytest.fixture
def stopped_pcscd():
    pid = int(os.environ["TB_PCSCD_PID"])
    os.kill(pid, signal.SIGSTOP)
    try:
        yield pid
    finally:
        os.kill(pid, signal.SIGCONT)


def timed(*args, **kw):
    start = time.monotonic()
    r = tb(*args, timeout=GUARD, **kw)
    return r, time.monotonic() - start


def test_tokens_ends_with_pcscd_does_not_answer(stopped_pcscd, tmp_path):
    r, elapsed = timed("tokens", env={"XDG_CONFIG_HOME": str(tmp_path / "c")})
    assert r.returncode == 5, r.stderr
    assert r.stderr == MESSAGE
    assert elapsed < 15, elapsed


def test_tokens_wait_ends_with_pcscd_does_not_answer(stopped_pcscd, tmp_path):
    r, elapsed = timed("tokens", "--wait", "--timeout", "3", env={"XDG_CONFIG_HOME": str(tmp_path / "c")})
    assert r.returncode == 5, r.stderr
    assert r.stderr.endswith(MESSAGE), r.stderr
    assert elapsed < 15, elapsed


def test_doctor_says_pcscd_does_not_answer(stopped_pcscd, tmp_path):
    home = tmp_path / "home"
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local/share")}
    r, elapsed = timed("doctor", "--json", env=env)
    assert r.returncode == 35, r.stderr
    checks = {c["name"]: c for c in json.loads(r.stdout)}
    assert not checks["pcscd"]["ok"]
    assert checks["pcscd"]["detail"].startswith("does not answer: it runs but is stopped or hung"), checks["pcscd"]
    assert checks["pcscd"]["fix"] == "restart it: systemctl restart pcscd"
    assert checks["configuration"]["ok"]  # the other checks still ran
    assert elapsed < 15, elapsed


def test_after_sigcont_pcscd_is_used_again(tmp_path):
    pid = int(os.environ["TB_PCSCD_PID"])
    os.kill(pid, signal.SIGSTOP)
    try:
        assert tb("tokens", timeout=GUARD).returncode == 5
    finally:
        os.kill(pid, signal.SIGCONT)
    r = tb("tokens", timeout=GUARD)
    assert r.returncode == 0, r.stderr
    home = tmp_path / "home"
    r = tb("doctor", "--json", env={"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
                                    "XDG_DATA_HOME": str(home / ".local/share")}, timeout=GUARD)
    assert {c["name"]: c for c in json.loads(r.stdout)}["pcscd"]["ok"], r.stdout


# pcscd stopped after it answered: the first call's deadline is past, every later call has one of its own
# (TokenDevices' PCSCCall: a call that stalls while pcscd answers nothing, and pcscd then fails a question of its
# own, is given up). GUARD is the hang guard; the commands end within a few seconds of their stalled call.


def test_pin_status_wait_ends_when_pcscd_stops_after_answering(tmp_path):
    pid = int(os.environ["TB_PCSCD_PID"])
    p = subprocess.Popen([TOKENBRIDGE, "pin", "status", "--wait", "--timeout", "6"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, start_new_session=True,
                         env=dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "c"), XDG_DATA_HOME=str(tmp_path / "d")))
    try:
        time.sleep(1.5)  # it has listed the (empty) readers and waits for a card
        assert p.poll() is None, p.communicate()
        os.kill(pid, signal.SIGSTOP)
        out, err = p.communicate(timeout=GUARD)
    finally:
        os.kill(pid, signal.SIGCONT)
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 5, err
    assert err.endswith(MESSAGE), err


def test_watch_obeys_sigterm_when_pcscd_stops_under_it():
    pid = int(os.environ["TB_PCSCD_PID"])
    w = Watch()
    try:
        os.kill(pid, signal.SIGSTOP)
        time.sleep(0.5)
        assert w.end(signal.SIGTERM) == 0, w.stderr  # Watch.end waits at most 20 s (the hang guard)
    finally:
        os.kill(pid, signal.SIGCONT)
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait()
