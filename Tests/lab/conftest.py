"""Token lab tests: one QEMU guest (Tools/lab) booted once per session; each test runs commands inside it with
virtual tokens attached over USB/IP. When the lab cannot boot, every test is skipped with the reason."""
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAB = str(ROOT / "Tools" / "lab")
BIN = Path(os.environ.get("TB_BIN", ROOT / ".build" / "debug"))
NAME = f"pytest-{os.getpid()}"
# A real token passed into the guest (opt-in: Tools/lab checks TOKENBRIDGE_HIL=1 and the serial allow-list).
PASSTHROUGH = os.environ.get("LAB_PASSTHROUGH", "")
_state = {}


def _lab_unavailable():
    if "reason" not in _state:
        r = subprocess.run([LAB, "check"], capture_output=True, text=True)
        _state["reason"] = None if r.returncode == 0 else "lab cannot boot: " + " / ".join(
            l for l in r.stdout.splitlines() if l.startswith("missing"))
    return _state["reason"]


def _usbip_unavailable():
    r = subprocess.run([str(BIN / "virtual-token"), "help", "usbip"], capture_output=True, text=True)
    return None if r.returncode == 0 and "--listen" in r.stdout + r.stderr else "virtual-token has no usbip command in this build"


@pytest.fixture(scope="session")
def guest():
    reason = _lab_unavailable()
    if reason:
        pytest.skip(reason)
    extra = ["--passthrough", PASSTHROUGH] if PASSTHROUGH else []
    r = subprocess.run([LAB, "start", "--name", NAME, *extra], capture_output=True, text=True, timeout=400,
                       env={**os.environ, "TB_BIN": str(BIN)})
    if r.returncode != 0:
        pytest.skip(f"lab did not boot: {r.stderr.strip()[-300:]}")
    yield Guest()
    subprocess.run([LAB, "stop", "--name", NAME], timeout=60)


class Guest:
    def run(self, *cmd, attach=(), timeout=180):
        args = [LAB, "run", "--name", NAME]
        for a in attach:
            args += ["--attach", a]
        return subprocess.run([*args, "--", *cmd], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "TB_BIN": str(BIN)})

    def sh(self, script, attach=(), timeout=180):
        return self.run("bash", "-c", script, attach=attach, timeout=timeout)


@pytest.fixture
def devices(guest):
    reason = _usbip_unavailable()
    if reason:
        pytest.skip(reason)
    return guest


def flows(guest, kind, attach):
    """Tests/lab/guest_flows.py inside the guest: one UAF flow with the attached device; its JSON summary."""
    r = guest.run("python3", str(ROOT / "Tests" / "lab" / "guest_flows.py"), kind, attach=attach, timeout=400)
    assert r.returncode == 0, r.stdout[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])
