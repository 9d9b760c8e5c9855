"""The tokens the CLI tests run on, as parameters of the same tests (issue 25): our own simulators ("virtual") and
firmware nobody here wrote (Tools/third-party: "canokey" for FIDO2 and PIV, "solo1" for FIDO2).

A FIDO2 key has the interface of fido2_conn.Key: sock, start(), stop(), replug(), ctap(), plus `impl`.
A PIV card has the interface of conftest.Card that the tests use: reader, id, slot, stop(), plus `impl` and `env`
(what a subprocess needs to reach its pcscd).

CanoKey fabricates its card at every start (about 10 s, its factory reset asks five emulated touches 2 s apart),
so one instance of each CanoKey kind is started ahead, while the previous test runs."""
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest
from fido2.ctap2 import Ctap2
from fido2.ctap2.pin import PinProtocolV1, PinProtocolV2

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


_spare_keys = {}  # name -> a _Bridge started ahead (CanoKey only: its start takes 10 s)
_session_dir = None  # the keys' directories (a spare starts before its test's tmp_path exists); removed at the end


def _key_dir(name):
    global _session_dir
    if _session_dir is None:
        _session_dir = tempfile.mkdtemp(prefix="tb-third-party-")
    return tempfile.mkdtemp(prefix=f"{name}-", dir=_session_dir)


def _fresh_bridge(name):
    spare = _spare_keys.pop(name, None)
    bridge = spare or _Bridge(name, _key_dir(name))
    if name == "canokey":
        _spare_keys[name] = _Bridge(name, _key_dir(name))
    bridge.wait()
    return bridge


def stop_spares():
    global _session_dir
    for b in _spare_keys.values():
        b.stop()
    _spare_keys.clear()
    if _session_dir:
        shutil.rmtree(_session_dir, ignore_errors=True)
        _session_dir = None
    for c in _spare_cards.values():
        c.close()
    _spare_cards.clear()


class ThirdPartyKey:
    """A factory-new third-party FIDO2 key behind the bridge; stop() unplugs it, start() plugs in the same key
    (solo1: its state files; CanoKey: a new process is a factory reset, said where a test relies on it)."""

    def __init__(self, impl, tmp_path):
        self.impl = impl
        self.bridge = _fresh_bridge(impl)
        self.sock = self.bridge.sock
        self.state = self.bridge.state
        self.args = ()

    @property
    def proc(self):
        return self.bridge.proc

    def start(self):
        if self.bridge.proc.poll() is not None:
            self.bridge = _Bridge(self.impl, self.bridge.dir)
            self.bridge.wait()

    def stop(self):
        self.bridge.stop()

    def ctap(self):
        return Ctap2(open_device(self.sock))

    def replug(self):
        def stamp():
            try:
                st = os.stat(self.sock)
                return st.st_ino, st.st_ctime_ns
            except FileNotFoundError:
                return None
        before = stamp()
        self.bridge.proc.send_signal(signal.SIGUSR1)
        end = time.monotonic() + 30
        while stamp() in (None, before):
            if time.monotonic() > end:
                raise AssertionError(f"{self.impl} replug timed out")
            time.sleep(0.05)

    def remove(self):
        self.bridge.stop()
        shutil.rmtree(self.bridge.dir, ignore_errors=True)


def key_impl(request):
    """The implementation of a fixture parametrized over FIDO2_IMPLEMENTATIONS; third-party ones built first."""
    if request.param != "virtual":
        request.getfixturevalue("third_party_built")
    return request.param


def make_key(impl, tmp_path, *args):
    if impl == "virtual":
        k = VirtualKey(tmp_path, *args)
        k.impl = "virtual"
        return k
    assert not args, "third-party keys take no simulator options"
    return ThirdPartyKey(impl, tmp_path)


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


_spare_cards = {}


class CanokeyCard:
    """A fresh CanoKey PIV card (YubiKey 5.7.0 to its answers, serial 0) in its own pcscd. While it lives the
    test's environment points at that pcscd (PCSCLITE_CSOCK_NAME), so tokenbridge and the peers reach it."""
    impl = "canokey"
    reader = "Canokey [OpenPGP PIV OATH] 00 00"
    slot = 0
    serial = 0
    id = "piv-0"

    def __init__(self, monkeypatch):
        self.pcscd = _spare_cards.pop("canokey", None) or _CanokeyPcscd()
        _spare_cards["canokey"] = _CanokeyPcscd()
        self.pcscd.wait()
        self.env = self.pcscd.env
        monkeypatch.setenv("PCSCLITE_CSOCK_NAME", self.env["PCSCLITE_CSOCK_NAME"])

    def stop(self):
        self.pcscd.close()


def piv_params():
    """For @pytest.mark.parametrize("card", piv_params(), indirect=True)."""
    return PIV_IMPLEMENTATIONS
