"""Token lab tests: one QEMU guest (Tools/lab) booted once per session; each test runs commands inside it with
virtual tokens attached over USB/IP. When the lab cannot boot, every test is skipped with the reason (fails
with it under LAB_REQUIRED=1, as Tools/test runs them).

One suite for the virtual and the real device. A test that works with any token asks for the `dut` fixture (the
device under test) and the interface it needs; by default that is a virtual device held for the module. With a
resident token — a real one passed through (LAB_PASSTHROUGH=VID:PID, opt-in: TOKENBRIDGE_HIL=1 and its serial in
TOKENBRIDGE_HIL_SERIAL, which Tools/lab checks), or a virtual composite token standing in for one
(LAB_STANDIN=composite, which checks this mode on machines without a real token) — the same tests run against it.
Tests that write to the token (PIN set, key generation, registrations, a PIN attempt) run on a resident token only
when TOKENBRIDGE_HIL_DESTRUCTIVE names its serial (the confirmation); otherwise they are skipped and say so. Tests
that need what only a virtual device can do (USB/IP detach, several devices, a simulated touch) ask for `devices`
and are skipped with a resident token."""
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAB = str(ROOT / "Tools" / "lab")
BIN = Path(os.environ.get("TB_BIN", ROOT / ".build" / "debug"))
# LAB_GUEST=NAME: a guest that Tools/test started (`Tools/lab start --name NAME`) and stops itself, shared by the
# virtual pass and the resident-token pass (one boot for both); else this session boots its own and stops it.
SHARED_GUEST = os.environ.get("LAB_GUEST", "")
NAME = SHARED_GUEST or f"pytest-{os.getpid()}"
# LAB_SYSTEMD_GUEST=NAME: a --systemd guest that Tools/test started and stops itself, for the modules that need one
# (systemd_run); their scripts start from what they set up (root's local data and configuration reset, the journal
# read from their start), so one boot serves them in turn. Else each boots a guest of its own.
SYSTEMD_GUEST = os.environ.get("LAB_SYSTEMD_GUEST", "")
# A real token passed into the guest (opt-in: Tools/lab checks TOKENBRIDGE_HIL=1 and the serial allow-list).
PASSTHROUGH = os.environ.get("LAB_PASSTHROUGH", "")
# A virtual composite token attached once for the whole session, treated as a real one (see the module text).
STANDIN = os.environ.get("LAB_STANDIN", "")
STANDIN_SERIAL = "29000001"
RESIDENT = bool(PASSTHROUGH or STANDIN)
_state = {}


def systemd_run(script, timeout):
    """Runs a guest script (Tests/lab/guest_*.sh) in a guest booted with systemd, with this session's TB_BIN."""
    where = ["--name", SYSTEMD_GUEST] if SYSTEMD_GUEST else ["--systemd"]
    return subprocess.run([LAB, "run", *where, "--", str(ROOT / "Tests" / "lab" / script)], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "TB_BIN": str(BIN)})


def _lab_unavailable():
    if "reason" not in _state:
        r = subprocess.run([LAB, "check"], capture_output=True, text=True)
        _state["reason"] = None if r.returncode == 0 else "lab cannot boot: " + " / ".join(
            l for l in r.stdout.splitlines() if l.startswith("missing"))
    return _state["reason"]


def _usbip_unavailable():
    r = subprocess.run([str(BIN / "virtual-token"), "help", "usbip"], capture_output=True, text=True)
    return None if r.returncode == 0 and "--listen" in r.stdout + r.stderr else "virtual-token has no usbip command in this build"


def _unavailable(reason):
    """A lab that cannot boot: the tests are skipped with the reason, or fail when the run asked for the lab
    (LAB_REQUIRED=1, as Tools/test sets it): a suite that was to run the lab must not pass without it."""
    if os.environ.get("LAB_REQUIRED") == "1":
        pytest.fail(f"the token lab was asked for (LAB_REQUIRED=1) and cannot run: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def guest():
    reason = _lab_unavailable()
    if reason:
        _unavailable(reason)
    extra = ["--passthrough", PASSTHROUGH] if PASSTHROUGH else []
    if SHARED_GUEST and PASSTHROUGH:
        pytest.fail("LAB_PASSTHROUGH needs a guest of its own (the token is passed in at boot): unset LAB_GUEST")
    # `start` reuses a running guest of that name ("already running") and boots one otherwise.
    r = subprocess.run([LAB, "start", "--name", NAME, *extra], capture_output=True, text=True, timeout=400,
                       env={**os.environ, "TB_BIN": str(BIN)})
    if r.returncode != 0:
        _unavailable(f"lab did not boot: {r.stderr.strip()[-300:]}")
    g = Guest()
    if STANDIN:
        if STANDIN != "composite":
            pytest.fail(f"LAB_STANDIN={STANDIN}: only 'composite' is supported")
        r = g.sh(_STANDIN_UP, timeout=120)
        if r.returncode != 0:
            SHARED_GUEST or subprocess.run([LAB, "stop", "--name", NAME], timeout=60)
            pytest.fail(f"the stand-in token did not come up: {r.stdout[-2000:]}")
    yield g
    if STANDIN and SHARED_GUEST:  # the shared guest goes on: take the stand-in out again
        g.sh(_STANDIN_DOWN, timeout=120)
    if not SHARED_GUEST:
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


def hold(guest, kind):
    """The virtual pass's held device: a virtual `kind` device attached until release() (one at a time)."""
    if _state.get("held") == kind:
        return
    release(guest)
    r = guest.sh(_held_up(HELD_PORT, kind), timeout=120)
    assert r.returncode == 0, f"the held {kind} device did not come up: {r.stdout[-2000:]}"
    _state["held"] = kind


def release(guest):
    if _state.pop("held", None):
        guest.sh(_held_down(HELD_PORT), timeout=120)


@pytest.fixture
def devices(guest):
    """Virtual devices attached per test; for what only they can do (detach over USB/IP, several devices)."""
    release(guest)  # a held device goes first: these tests count and number the devices they attach
    if RESIDENT:
        pytest.skip("needs virtual devices attached over USB/IP (detach, replug, several devices): not run with a "
                    "resident token")
    reason = _usbip_unavailable()
    if reason:
        _unavailable(reason)
    return guest


# Serves a virtual device detached from the job, so it stays attached across jobs until _held_down: the stand-in
# (composite, its own serial and port, for the session) and, in the virtual pass, the device a module's `dut` tests
# share (one attach for the module instead of one a test, as a resident token is shared). Its server is not a
# job's child, and no job's cleanup detaches it (lab-job leaves the ports 3270-3289 attached).
def _held_up(port, kind, serial=""):
    hid = "" if kind == "ccid" else "for _ in $(seq 100); do [ -n \"$(ls /sys/class/hidraw)\" ] && break; sleep 0.1; done"
    reader = "" if kind == "fido" else \
        "for _ in $(seq 100); do pcsc_scan -r 2>/dev/null | grep -q '^0: ' && break; sleep 0.1; done"
    return f"""set -u
vt="${{TB_BIN:-$LAB_ROOT/.build/debug}}/virtual-token"; d=/tmp/held-{port}; rm -rf $d; mkdir -p $d
setsid "$vt" usbip --listen 127.0.0.1:{port} --device {kind} {f"--serial {serial}" if serial else ""} \\
  --state-dir $d >$d/server.log 2>&1 </dev/null &
for _ in $(seq 100); do usbip --tcp-port {port} list -r 127.0.0.1 >/dev/null 2>&1 && break; sleep 0.1; done
usbip --tcp-port {port} attach -r 127.0.0.1 -b 1-1 || {{ cat $d/server.log; exit 1; }}
{hid}
udevadm settle -t 10
{reader}
"""


def _held_down(port):
    return f"""set -u
for p in $(usbip port 2>/dev/null | awk '/^Port/{{p=$2}} /127.0.0.1:{port}\\//{{sub(":", "", p); print p}}'); do usbip detach -p $p; done
pkill -f 'usbip --listen 127.0.0.1:{port}' || true
for _ in $(seq 100); do [ -z "$(ls /sys/class/hidraw)" ] && break; sleep 0.1; done
for _ in $(seq 100); do pcsc_scan -r 2>/dev/null | grep -q '^0: ' || break; sleep 0.1; done
udevadm settle -t 10
"""


_STANDIN_UP = _held_up(3270, "composite", STANDIN_SERIAL)
_STANDIN_DOWN = _held_down(3270)
HELD_PORT = 3280


# What the guest sees of the resident token: its USB device (by VID:PID), serial, interface classes, hidraw node
# (the HID interface of that device whose report descriptor starts with the FIDO usage page 06 D0 F1) and reader.
_RESIDENT_INFO = r"""set -u
want="$1"
for d in /sys/bus/usb/devices/*; do
  [ -f "$d/idVendor" ] || continue
  [ "$(cat $d/idVendor):$(cat $d/idProduct)" = "$want" ] || continue
  echo "vidpid=$want"; echo "serial=$(cat $d/serial 2>/dev/null)"; echo "product=$(cat $d/product 2>/dev/null)"
  echo "classes=$(cat $d/*:*/bInterfaceClass 2>/dev/null | sort -u | tr '
' ' ')"
  for h in /sys/class/hidraw/*; do
    [ -e "$h" ] || continue
    case "$(readlink -f $h/device)" in "$(readlink -f $d)"/*)
      [ "$(od -An -tx1 -N3 $h/device/report_descriptor | tr -d ' 
')" = 06d0f1 ] && echo "hidraw=${h##*/}";;
    esac
  done
  break
done
for _ in $(seq 100); do pcsc_scan -r 2>/dev/null | grep -q '^0: ' && break; sleep 0.1; done
pcsc_scan -r 2>/dev/null | sed -n 's/^0: /reader=/p'
"""


class Dut:
    """The device under test: `kind` names the interface a test needs (fido, ccid or composite). Virtual: one device
    of that kind held for the module's tests (see _held_up), changed when a test asks for another kind."""

    def __init__(self, guest, info):
        self.guest, self.info = guest, info

    @property
    def virtual(self):
        return self.info is None

    def _attach(self, kind):
        if self.virtual:
            hold(self.guest, kind)
            return []
        need = {"fido": ["fido"], "ccid": ["ccid"], "composite": ["fido", "ccid"]}[kind]
        for n in need:
            if not self.info.get(n):
                pytest.skip(f"the resident token {self.info['vidpid']} has no {n.upper()} interface")
        return []

    def run(self, *cmd, kind, timeout=180):
        return self.guest.run(*cmd, attach=self._attach(kind), timeout=timeout)

    def sh(self, script, kind, timeout=180):
        return self.guest.run("bash", "-c", script, attach=self._attach(kind), timeout=timeout)

    def destructive(self, what):
        """A test that writes to the token: on a resident token only when its serial is confirmed."""
        if self.virtual:
            return
        serial = self.info["serial"]
        if os.environ.get("TOKENBRIDGE_HIL_DESTRUCTIVE", "") != serial:
            pytest.skip(f"{what} writes to the token {serial}: set TOKENBRIDGE_HIL_DESTRUCTIVE={serial} to confirm "
                        "(the token must be in its factory state: PIV PIN 123456, FIDO2 without a PIN)")


def _resident(guest):
    if "resident" not in _state:
        want = PASSTHROUGH.lower() if PASSTHROUGH else "1209:0001"
        r = guest.run("bash", "-c", _RESIDENT_INFO, "info", want)
        info = dict(l.split("=", 1) for l in r.stdout.splitlines() if "=" in l)
        assert info.get("vidpid") == want, f"the resident token {want} is not in the guest: {r.stdout}"
        classes = info["classes"].split()
        info["fido"] = "03" in classes and "hidraw" in info
        info["ccid"] = "0b" in classes
        _state["resident"] = info
    return _state["resident"]


@pytest.fixture(scope="module")
def dut(guest):
    if not RESIDENT:
        reason = _usbip_unavailable()
        if reason:
            _unavailable(reason)
        yield Dut(guest, None)
        release(guest)  # the module's held device: the next module starts with none
        return
    yield Dut(guest, _resident(guest))


def flows(dut, kind):
    """Tests/lab/guest_flows.py inside the guest: one UAF flow with the device under test; its JSON summary."""
    dut.destructive(f"the {kind} flow (PIN, registration)")
    r = dut.run("python3", str(ROOT / "Tests" / "lab" / "guest_flows.py"), kind, "" if dut.virtual else "resident",
                kind="fido" if kind == "fido" else "ccid", timeout=400)
    assert r.returncode == 0, r.stdout[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])
