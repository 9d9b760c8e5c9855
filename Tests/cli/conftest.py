"""CLI and real-peer tests. They run inside Tools/with-pcscd (private pcscd + vpcd reader); each test starts
its own virtual card(s) with fresh state and stops them by pid."""
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("TB_BIN", ROOT / ".build" / "debug"))
TOKENBRIDGE = str(BIN / "tokenbridge")
VIRTUAL_TOKEN = str(BIN / "virtual-token")
READERS = ["Virtual PCD 00 00", "Virtual PCD 00 01"]
DEFAULT_READER = READERS[0]  # the card fixture's reader (CanoKey's when a test runs on it)

if os.environ.get("TB_IN_NAMESPACE") != "1":
    pytest.exit("these tests need the private pcscd: run them through Tools/test", returncode=2)


def dbus_exec(path):
    """A program path for a D-Bus activation file's Exec= line: dbus-daemon splits it as a shell would, so the path
    is double-quoted with `"`, `\\`, `$` and `` ` `` escaped (as Tools/install-udev writes it)."""
    return '"' + "".join("\\" + c if c in '"\\$`' else c for c in str(path)) + '"'


def card_present(slot):
    return subprocess.run(["opensc-tool", "-r", str(slot), "-a"], capture_output=True).returncode == 0


def wait_until(pred, what, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class Card:
    def __init__(self, tmp_path, slot=0, serial=5000000, args=()):
        self.slot = slot
        self.serial = serial
        self.reader = READERS[slot]
        self.id = f"piv-{serial}"
        self.state = tmp_path / f"card{slot}.json"
        self.log = open(tmp_path / f"card{slot}.log", "w")
        # A card another test stopped without waiting shows in the reader until pcscd's next vpcd poll (up to
        # 400 ms): waiting for an empty reader first makes "present" below mean this card, not the dead one.
        wait_until(lambda: not card_present(slot), f"{self.reader} empty before a new card")
        self.proc = subprocess.Popen(
            [VIRTUAL_TOKEN, "piv", "--state", str(self.state), "--vpcd", f"127.0.0.1:{35963 + slot}",
             "--serial", str(serial), *args], stderr=self.log)
        wait_until(lambda: card_present(slot), f"card in {self.reader}")

    def remove(self):
        self.proc.send_signal(signal.SIGUSR1)
        wait_until(lambda: not card_present(self.slot), "card removal")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            wait_until(lambda: not card_present(self.slot), "card gone")
        self.log.close()


@pytest.fixture
def cards(tmp_path):
    started = []

    def start(slot=0, serial=None, args=()):
        c = Card(tmp_path, slot, serial or 5000000 + slot, args)
        started.append(c)
        return c

    yield start
    for c in reversed(started):
        c.stop()


def make_card(impl, request, cards, monkeypatch):
    """A factory-new PIV card of `impl` ("virtual" or "canokey") for the running test."""
    if impl == "virtual":
        c = cards()
        c.impl, c.env = "virtual", {}
        return c
    request.getfixturevalue("third_party_built")
    from implementations import CanokeyCard
    c = CanokeyCard(monkeypatch)
    monkeypatch.setattr(__import__("conftest"), "DEFAULT_READER", c.reader)
    request.addfinalizer(c.stop)
    return c


@pytest.fixture
def card(request, cards, monkeypatch):
    """Our virtual card; a test parametrized with `implementations.piv_params()` (indirect) also runs on CanoKey."""
    return make_card(getattr(request, "param", "virtual"), request, cards, monkeypatch)


@pytest.fixture(scope="session")
def third_party_built():
    """Tools/third-party build all (cached), once per session; the cards and keys started ahead stop at the end."""
    from implementations import ensure_built, stop_spares
    ensure_built()
    yield
    stop_spares()


def pin_pipe(pins):
    """A pipe whose read end holds `pins`, one per line (the write end is closed): pass it as --pin-fd."""
    r_fd, w_fd = os.pipe()
    os.write(w_fd, "".join(p + "\n" for p in pins).encode())
    os.close(w_fd)
    return r_fd


def tb(*args, pins=None, env=None, timeout=60):
    """Runs tokenbridge; `pins` (a list of lines) go through --pin-fd (a pipe), never argv. --pin-fd goes before a
    "--" in `args` (after it, everything is an operand)."""
    cmd = [TOKENBRIDGE, *args]
    pass_fds = ()
    r_fd = None
    if pins is not None:
        r_fd = pin_pipe(pins)
        end = cmd.index("--") if "--" in cmd else len(cmd)
        cmd[end:end] = ["--pin-fd", str(r_fd)]
        pass_fds = (r_fd,)
    full_env = dict(os.environ, **(env or {}))
    try:
        # start_new_session: no controlling terminal, so the CLI must not prompt.
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env,
                              pass_fds=pass_fds, start_new_session=True, stdin=subprocess.DEVNULL)
    finally:
        if r_fd is not None:
            os.close(r_fd)


def piv_tool(*args, reader=None):
    reader = reader or DEFAULT_READER
    return subprocess.run(["yubico-piv-tool", "-r", reader, *args], capture_output=True, text=True, timeout=60)


def pin_tries(reader=None):
    """PIN tries left as yubico-piv-tool (not our code) reads them."""
    out = piv_tool("-a", "status", reader=reader).stdout
    for line in out.splitlines():
        if line.startswith("PIN tries left:"):
            return int(line.split(":")[1])
    raise AssertionError(f"no PIN tries in yubico-piv-tool output:\n{out}")
