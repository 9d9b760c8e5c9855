"""A pcscd that runs but does not answer (stopped with SIGSTOP: it keeps its socket, accepts nothing further)
must not hang `doctor`, `tokens` or `tokens --wait --timeout` (issue 27, class 4): each ends with "pcscd does not
answer" and its exit status; after SIGCONT everything works again. The private pcscd of Tools/with-pcscd is the
one stopped (TB_PCSCD_PID). The subprocess timeout is a hang guard, far above tokenbridge's 5 s answer deadline."""
import json
import os
import signal
import time

import pytest

from conftest import tb

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
