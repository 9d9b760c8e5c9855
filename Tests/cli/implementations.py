"""The tokens the CLI tests run on, as parameters of the same tests: our own simulators ("virtual") and firmware nobody
here wrote (Tools/third-party: "canokey" for FIDO2 and PIV, "solo1" for FIDO2).

A FIDO2 key has the interface of fido2_conn.Key: sock, start(), stop(), replug(), ctap(), plus `impl`.
A PIV card has the interface of conftest.Card that the tests use: reader, id, slot, stop(), plus `impl` and `env`
(what a subprocess needs to reach its pcscd).

CanoKey fabricates its card at every start (about 10 s, its factory reset asks five emulated touches 2 s apart),
so one process of each CanoKey kind serves the whole session and is brought back to factory state for each test
by the token's own reset: FIDO2 by a power cycle and authenticatorReset, PIV by blocking PIN and PUK and its
RESET (what `ykman piv reset` does)."""
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest
from fido2.ctap2 import Ctap2
from fido2.ctap2.pin import ClientPin, PinProtocolV1, PinProtocolV2

from conftest import ROOT, card_present
from fido2_conn import Key as VirtualKey, open_device

FIDO2_IMPLEMENTATIONS = ["virtual", "canokey", "solo1"]
PIV_IMPLEMENTATIONS = ["virtual", "canokey"]
THIRD_PARTY = ROOT / "Tools" / "third-party"

# Why a test is simulator-only, by what it needs from virtual-token.
SIMULATOR_ONLY = {
    "state": "reads or edits virtual-token's state file",
    "options": "starts virtual-token with options a third-party firmware does not have",
    "presence": "needs the simulator's touch (SIGUSR2, --presence): solo1 never asks for one, CanoKey runs in NFC mode",
    "getinfo": "asserts the simulator's own getInfo values",
    "log": "counts requests in the simulator's log",
    "apdus": "counts APDUs in the suite pcscd's log (pcscd -a); CanoKey's card has a pcscd of its own",
    "vpcd": "removes and re-inserts the card through vpcd, which CanoKey's driver has not",
    "swap": "plugs a second virtual-token key in where the key under test was",
}


def pin_protocol(ctap):
    """The newest PIN protocol the key offers (solo1 has only 1)."""
    return PinProtocolV2() if 2 in (ctap.info.pin_uv_protocols or []) else PinProtocolV1()


def skip_unless_simulator(impl, why):
    if impl != "virtual":
        pytest.skip(f"{impl}: simulator-only: {SIMULATOR_ONLY[why]}")


def ensure_built():
    """Tools/third-party build all, once per session: CI starts from a clean clone."""
    r = subprocess.run([str(THIRD_PARTY), "build", "all"], capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise AssertionError(f"Tools/third-party build all failed:\n{r.stderr}")


# --- FIDO2 ----------------------------------------------------------------------------------------------------

class _Bridge:
    """One `Tools/third-party fido2` process in a directory of its own; ready when its socket exists."""

    def __init__(self, name, directory):
        self.name = name
        self.dir = directory
        self.sock = os.path.join(directory, "fido.sock")
        self.state = os.path.join(directory, "state")
        self.log = open(os.path.join(directory, "bridge.log"), "a")
        self.proc = subprocess.Popen([str(THIRD_PARTY), "fido2", name, "--socket", self.sock, "--state", self.state],
                                     stderr=self.log, stdout=self.log)

    def wait(self, timeout=60):
        end = time.monotonic() + timeout
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} bridge exited {self.proc.returncode}: "
                                     + open(os.path.join(self.dir, "bridge.log")).read()[-2000:])
            if time.monotonic() > end:
                raise AssertionError(f"{self.name} did not come up in {timeout} s")
            time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
        self.log.close()


_pool = {}  # name -> the _Bridge kept for the session (CanoKey only: a start fabricates its card, about 10 s)
_session_dir = None  # the keys' directories; removed at the end


def _key_dir(name):
    global _session_dir
    if _session_dir is None:
        _session_dir = tempfile.mkdtemp(prefix="tb-third-party-")
    return tempfile.mkdtemp(prefix=f"{name}-", dir=_session_dir)


def _socket_stamp(path):
    try:
        st = os.stat(path)
        return st.st_ino, st.st_ctime_ns  # an inode number may be reused; with its ctime it is new
    except FileNotFoundError:
        return None


def _replug(bridge, what):
    """SIGUSR1: unplugged (if it was not), power-cycled keeping its state, plugged in again (a new socket)."""
    before = _socket_stamp(bridge.sock)
    bridge.proc.send_signal(signal.SIGUSR1)
    end = time.monotonic() + 30
    while _socket_stamp(bridge.sock) in (None, before):
        if bridge.proc.poll() is not None:
            raise AssertionError(f"{what} bridge exited {bridge.proc.returncode} at a replug")
        if time.monotonic() > end:
            raise AssertionError(f"{what} replug timed out; its log ends:\n" + _log_tail(bridge))
        time.sleep(0.02)


def _log_tail(bridge):
    with open(os.path.join(bridge.dir, "bridge.log"), errors="replace") as f:
        bridge_log = f.read()[-1500:]
    with open(os.path.join(bridge.state, "firmware.log"), errors="replace") as f:
        firmware_log = f.read()[-1500:]
    return f"{bridge_log}\n--- firmware.log:\n{firmware_log}"


def _unplug(bridge, what):
    """SIGUSR2: the socket goes and the connections drop; the firmware keeps running, unplugged."""
    bridge.proc.send_signal(signal.SIGUSR2)
    end = time.monotonic() + 10
    while os.path.exists(bridge.sock):
        if bridge.proc.poll() is not None:
            return
        if time.monotonic() > end:
            raise AssertionError(f"{what} unplug timed out")
        time.sleep(0.02)


# What tests that set no PIN would otherwise see differently: a CTAP reset keeps the PIN try counter the last PIN
# left (canokey-core's ctap_install writes no counter; set_pin writes 8), and a freshly fabricated key has none at
# all (getPINRetries answers a negative number). A PIN set and a second reset leave 8, as on a key that had a PIN.
_NORMALISING_PIN = "factory-state"


def _canokey_factory_state(bridge):
    """The pooled CanoKey brought to factory state without its 10 s start: a power cycle (its MAGIC REBOOT report,
    through a replug), then authenticatorReset inside the 10 s the firmware allows after power-up (NFC mode: no
    touch is asked); a PIN set and a second reset give every test the same try counter (see _NORMALISING_PIN)."""
    _replug(bridge, "canokey")
    device = _open_after_replug(bridge.sock)
    try:
        ctap = Ctap2(device)
        ctap.reset()
        ClientPin(ctap, pin_protocol(ctap)).set_pin(_NORMALISING_PIN)
        ctap.reset()
        info = ctap.get_info()
        assert info.options.get("clientPin") is False, info.options
    finally:
        device.close()


def _open_after_replug(sock):
    """The pooled CanoKey's first CTAPHID_INIT after a replug: a frame the firmware still had queued from before
    can arrive first, and python-fido2 refuses an INIT answer with another nonce ("Wrong nonce", seen under load)
    instead of reading on. A new connection and INIT then start clean."""
    from fido2.hid import ConnectionFailure
    for attempt in range(3):
        try:
            return open_device(sock)
        except ConnectionFailure:
            if attempt == 2:
                raise
            time.sleep(0.2)


def _pooled_canokey():
    b = _pool.get("canokey")
    if b is not None and b.proc.poll() is not None:
        b.stop()
        b = None
    if b is None:
        b = _Bridge("canokey", _key_dir("canokey"))
        b.wait()
        _pool["canokey"] = b
    _canokey_factory_state(b)
    return b


def stop_spares():
    """At the end of the session: the pooled keys and cards stop, their directories go."""
    global _session_dir
    for b in _pool.values():
        b.stop()
    _pool.clear()
    if _session_dir:
        shutil.rmtree(_session_dir, ignore_errors=True)
        _session_dir = None
    for c in _card_pool.values():
        c.close()
    _card_pool.clear()


class ThirdPartyKey:
    """A factory-new third-party FIDO2 key behind the bridge; stop() unplugs it, start() plugs in the same key.
    solo1: a process of its own per key (it starts in a fraction of a second); stop() ends it, start() restarts it on
    its state files (a power cycle). CanoKey: one process for the session, brought to factory state for each key
    (_canokey_factory_state); stop() unplugs it, start() plugs it back in (a power cycle keeping its state).
    `fresh=True`: a CanoKey process of its own, just fabricated (10 s), for what only a never-used key shows."""

    def __init__(self, impl, tmp_path, fresh=False):
        self.impl = impl
        self.pooled = impl == "canokey" and not fresh
        if self.pooled:
            self.bridge = _pooled_canokey()
        else:
            self.bridge = _Bridge(impl, _key_dir(impl))
            self.bridge.wait()
        self.sock = self.bridge.sock
        self.state = self.bridge.state
        self.args = ()

    @property
    def proc(self):
        return self.bridge.proc

    def start(self):
        if self.bridge.proc.poll() is not None:
            assert not self.pooled, "the session's CanoKey process ended"
            self.bridge = _Bridge(self.impl, self.bridge.dir)
            self.bridge.wait()
        elif not os.path.exists(self.sock):
            _replug(self.bridge, self.impl)

    def stop(self):
        if self.pooled:
            if self.bridge.proc.poll() is None:
                _unplug(self.bridge, self.impl)
        else:
            self.bridge.stop()

    def ctap(self):
        return Ctap2(open_device(self.sock))

    def replug(self):
        _replug(self.bridge, self.impl)


def key_impl(request):
    """The implementation of a fixture parametrized over FIDO2_IMPLEMENTATIONS; third-party ones built first."""
    if request.param != "virtual":
        request.getfixturevalue("third_party_built")
    return request.param


def make_key(impl, tmp_path, *args, fresh=False):
    """A factory-new key of `impl`; `args` are virtual-token options (the simulator's firmware profiles)."""
    if impl == "virtual":
        k = VirtualKey(tmp_path, *args)
        k.impl = "virtual"
        return k
    assert not args, "third-party keys take no simulator options"
    return ThirdPartyKey(impl, tmp_path, fresh=fresh)


# --- PIV ------------------------------------------------------------------------------------------------------

class _CanokeyPcscd:
    """A pcscd of its own (a nested Tools/with-pcscd --canokey --no-readers) holding a fresh CanoKey card. The
    command inside writes its pid and waits on stdin; the pcscd socket is reached through /proc/PID/root (the
    nested run has its own mount namespace). Closing stdin ends it, and with-pcscd stops pcscd by pid."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="tb-canokey-piv-")
        self.pidfile = os.path.join(self.dir, "inner.pid")
        self.log = open(os.path.join(self.dir, "with-pcscd.log"), "w")
        env = {k: v for k, v in os.environ.items() if k not in ("TB_IN_NAMESPACE", "PCSCLITE_CSOCK_NAME")}
        env.pop("TB_PCSCD_ARGS", None)
        self.proc = subprocess.Popen(
            [str(ROOT / "Tools" / "with-pcscd"), "--no-readers", "--canokey", "--", "sh", "-c",
             'echo $$ >"$0.tmp" && mv "$0.tmp" "$0" && exec cat >/dev/null', self.pidfile],
            stdin=subprocess.PIPE, stdout=self.log, stderr=self.log, env=env)
        self.env = None

    def wait(self, timeout=90):
        end = time.monotonic() + timeout
        while not os.path.exists(self.pidfile):
            if self.proc.poll() is not None:
                raise AssertionError("with-pcscd --canokey exited: " + open(self.log.name).read()[-2000:])
            if time.monotonic() > end:
                raise AssertionError("CanoKey's pcscd did not come up")
            time.sleep(0.1)
        pid = open(self.pidfile).read().strip()
        self.env = {"PCSCLITE_CSOCK_NAME": f"/proc/{pid}/root/run/pcscd/pcscd.comm"}
        old = os.environ.get("PCSCLITE_CSOCK_NAME")
        os.environ["PCSCLITE_CSOCK_NAME"] = self.env["PCSCLITE_CSOCK_NAME"]
        try:
            while not card_present(0):
                if time.monotonic() > end:
                    raise AssertionError("no CanoKey card in its reader")
                time.sleep(0.1)
        finally:
            os.environ["PCSCLITE_CSOCK_NAME"] = old

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                self.proc.wait(timeout=10)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


_card_pool = {}  # "canokey" -> the _CanokeyPcscd kept for the session

# The PIV reset, as `ykman piv reset` sends it: wrong PINs and wrong PUKs until both are blocked, then RESET
# (INS FB, YubiKey's; canokey-core's piv_reset takes it only then). A PIN or PUK no test uses.
_WRONG = "3237313832383138"  # "27182818"
_PIV_RESET_APDUS = (["00A4040005A000000308"] + [f"0020008008{_WRONG}"] * 12 + [f"002C008010{_WRONG}{_WRONG}"] * 12
                    + ["00FB0000"])


def _piv_reset(env):
    cmd = ["opensc-tool", "-r", "0"]
    for apdu in _PIV_RESET_APDUS:
        cmd += ["-s", apdu]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=dict(os.environ, **env))
    answers = [line for line in r.stdout.splitlines() if line.startswith("Received (SW1=")]
    assert len(answers) == len(_PIV_RESET_APDUS) and answers[-1] == "Received (SW1=0x90, SW2=0x00)", \
        f"CanoKey's PIV reset failed:\n{r.stdout}\n{r.stderr}"


class CanokeyCard:
    """A CanoKey PIV card in factory state (YubiKey 5.7.0 to its answers, serial 0) in its own pcscd, one for the
    session, reset for each test (_piv_reset). While a test runs its environment points at that pcscd
    (PCSCLITE_CSOCK_NAME), so tokenbridge and the peers reach it."""
    impl = "canokey"
    reader = "Canokey [OpenPGP PIV OATH] 00 00"
    slot = 0
    serial = 0
    id = "piv-0"

    def __init__(self, monkeypatch):
        p = _card_pool.get("canokey")
        if p is not None and p.proc.poll() is not None:
            p.close()
            p = None
        if p is None:
            p = _CanokeyPcscd()
            p.wait()  # a just-fabricated card: in factory state already
            _card_pool["canokey"] = p
        else:
            _piv_reset(p.env)
        self.pcscd = p
        self.env = p.env
        monkeypatch.setenv("PCSCLITE_CSOCK_NAME", self.env["PCSCLITE_CSOCK_NAME"])

    def stop(self):
        """The card stays in its reader for the next test (which resets it); the pcscd ends with the session."""


def piv_params():
    """For @pytest.mark.parametrize("card", piv_params(), indirect=True)."""
    return PIV_IMPLEMENTATIONS


# --- UAF authenticators: every token kind a UAF flow can run on -----------------------------------------------

UAF_TOKENS = [f"piv-{i}" for i in PIV_IMPLEMENTATIONS] + [f"fido2-{i}" for i in FIDO2_IMPLEMENTATIONS]
UAF_PIN = "123456"  # the PIV default PIN; set as the FIDO2 keys' PIN


class UAFToken:
    """One token a UAF flow runs on: a PIV card (PIN 123456, AAID 7B1D#0001) or a FIDO2 key with PIN 123456 set
    (AAID 7B1D#0002). `env` is what tokenbridge needs to reach it (a FIDO2 key's socket)."""

    def __init__(self, name, request, tmp_path, cards, monkeypatch):
        from conftest import make_card, tb
        self.kind, self.impl = name.split("-", 1)
        self.env = {}
        if self.kind == "piv":
            self.card = make_card(self.impl, request, cards, monkeypatch)
            self.aaid = "7B1D#0001"
            return
        if self.impl != "virtual":
            request.getfixturevalue("third_party_built")
        self.aaid = "7B1D#0002"
        self.key = make_key(self.impl, tmp_path)
        request.addfinalizer(self.key.stop)
        self.env = {"TOKENBRIDGE_VIRTUAL_FIDO": self.key.sock}
        r = tb("pin", "set", env=self.env, pins=[UAF_PIN])
        assert r.returncode == 0, r.stderr
