"""The bridge of `Tools/third-party fido2`: a Unix SOCK_SEQPACKET socket (one datagram = one 64-byte HID report, what
`virtual-token fido2 --socket` serves) in front of a third-party FIDO2 firmware's UDP reports (127.0.0.1:8111 in,
127.0.0.1:7112 out), with the replug and unplug signals that script's usage describes. Imported by Tools/third-party
only, which builds the firmwares and runs this in a network namespace of its own."""
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPORT = 64
IN_PORT, OUT_PORT = 8111, 7112  # the firmware reads reports on 8111 and writes them to 7112
# canokey's fido-hid-over-udp: a power cycle that keeps the key's state (virt-card/fido-hid-over-udp.c).
CANOKEY_MAGIC_REBOOT = bytes.fromhex(
    "ac1052ca95e569de69e02ebff333485f13f9b2da34c5a8a340526697a9ab2e0b"
    "394d8d04973c134005be1a0140bff6045bb26eb77a73eaa47813f6b49a7250dc")


def die(msg, code=1):
    print(f"third-party: {msg}", file=sys.stderr)
    sys.exit(code)


class Bridge:
    def __init__(self, name, d, libasan, sock_path, state_dir):
        """name: solo1 or canokey, built in d (Tools/third-party's layout); libasan: the ASan runtime canokey's
        build must load first."""
        self.name = name
        self.libasan = libasan
        self.path = sock_path
        self.state = Path(state_dir)
        self.state.mkdir(parents=True, exist_ok=True)
        self.firmware = str(d / ("solo1/main" if name == "solo1" else "canokey-core/build/fido-hid-over-udp"))
        self.proc = None
        self.listener = None
        self.clients = []
        self.channels = set()  # the CTAPHID channel ids the clients used since the last unplug
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", OUT_PORT))
        self.log = open(self.state / "firmware.log", "ab")

    def start_firmware(self):
        # Its own mount namespace with a private /tmp: canokey's test build reads /tmp/canokey-test-nfc and
        # writes /tmp/canokey-test-up, and --coverage writes .gcda files (GCOV_PREFIX); none of that may be shared
        # between instances. The working directory (its state files) stays what it was before the mount, and the
        # firmware runs from a copy there: its build may be under /tmp too (a clone there), hidden by the mount (the
        # firmwares are single self-contained executables).
        copy = self.state / "firmware"
        if not copy.exists():
            shutil.copy2(self.firmware, copy)
        script = 'mount -t tmpfs tmpfs /tmp && exec ./firmware'
        env = dict(os.environ, GCOV_PREFIX="/tmp/gcov", ASAN_OPTIONS="detect_leaks=0")
        if self.name == "canokey":
            # Its busy waits (10 s of clock reads at each start, a 100 µs select loop) sleep instead: a copy beside
            # the firmware's (found from the working directory, as the firmware is), after libasan, which must
            # come first.
            shim = self.state / "busy-wait-yield.so"
            if not shim.exists():
                shutil.copy2(Path(self.firmware).parent / "busy-wait-yield.so", shim)
            env["LD_PRELOAD"] = f"{self.libasan} ./busy-wait-yield.so"
        self.proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                                     cwd=self.state, stdout=self.log, stderr=self.log, env=env)
        self.wait_ready()

    def wait_ready(self):
        """Until the firmware answers a CTAPHID INIT: canokey binds its port first and then fabricates its card for
        about 10 s (its factory reset asks five emulated touches, 2 s apart); the socket appears only after. An INIT
        goes out every 0.2 s until one is answered, each with a nonce of its own; the firmware answers those it got
        while it fabricated once it runs, and all of them are read here: one left over would reach the first client
        as an INIT answer with another nonce (python-fido2: "Wrong nonce")."""
        deadline = time.monotonic() + 60
        self.udp.settimeout(0.2)
        sent, ready = set(), False
        try:
            while not ready:
                if self.proc.poll() is not None:
                    die(f"{self.name} exited {self.proc.returncode}; see {self.state}/firmware.log")
                if time.monotonic() > deadline:
                    die(f"{self.name} did not answer CTAPHID INIT within 60 s")
                if udp_port_bound(IN_PORT):
                    nonce = os.urandom(8)
                    sent.add(nonce)
                    init = (b"\xff\xff\xff\xff\x86\x00\x08" + nonce).ljust(REPORT, b"\0")
                    self.udp.sendto(init, ("127.0.0.1", IN_PORT))
                    try:
                        while True:
                            answer = self.udp.recv(REPORT + 1)
                            if answer[4] == 0x86 and answer[7:15] in sent:
                                sent.discard(answer[7:15])
                                ready = True
                    except socket.timeout:
                        pass
                else:
                    time.sleep(0.05)
            end = time.monotonic() + 10
            while sent and time.monotonic() < end:
                try:
                    answer = self.udp.recv(REPORT + 1)
                    if answer[4] == 0x86:
                        sent.discard(answer[7:15])
                except socket.timeout:
                    pass
        finally:
            self.udp.settimeout(None)
            self.drain()

    def stop_firmware(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # Its port is free only once the process is gone: wait, so a restart binds it anew.
        deadline = time.monotonic() + 5
        while udp_port_bound(IN_PORT) and time.monotonic() < deadline:
            time.sleep(0.05)

    def listen(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        tmp = f"{self.path}.new-{os.getpid()}"
        if os.path.exists(tmp):
            os.unlink(tmp)
        s.bind(tmp)
        s.listen(8)
        os.rename(tmp, self.path)  # plugged: a new inode at the path
        self.listener = s

    def unplug(self):
        if os.path.exists(self.path):
            os.unlink(self.path)
        if self.listener:
            self.listener.close()
            self.listener = None
        for c in self.clients:
            c.close()
        self.clients = []
        self.settle()

    def settle(self):
        """A client cut off in the middle of a message leaves canokey's CTAPHID channel busy, and its MAGIC REBOOT
        sets the clock back, so the busy channel's 800 ms timeout ends only as long after the reboot as the firmware
        had run before it, while every other channel, INIT included, gets ERR_CHANNEL_BUSY (ctaphid.c). An INIT on the
        busy channel's own id is a resync the firmware always takes: one on each channel the clients used."""
        for cid in self.channels:
            init = (cid + b"\x86\x00\x08" + os.urandom(8)).ljust(REPORT, b"\0")
            self.udp.sendto(init, ("127.0.0.1", IN_PORT))
        self.channels.clear()

    def drain(self):
        self.udp.setblocking(False)
        try:
            while True:
                self.udp.recv(REPORT + 1)
        except BlockingIOError:
            pass
        self.udp.setblocking(True)

    def replug(self):
        self.unplug()
        if self.name == "solo1":
            self.stop_firmware()  # its state files stay in the directory: restarting on them is a power cycle
            self.drain()
            self.start_firmware()
        else:
            # Every start of fido-hid-over-udp is a factory reset; its MAGIC REBOOT report is a power cycle.
            self.udp.sendto(CANOKEY_MAGIC_REBOOT, ("127.0.0.1", IN_PORT))
            self.wait_ready()
        self.listen()

    def serve(self):
        wake_r, wake_w = socket.socketpair()
        wake_w.setblocking(False)
        signal.set_wakeup_fd(wake_w.fileno())
        pending = []
        signal.signal(signal.SIGUSR1, lambda *_: pending.append("replug"))
        signal.signal(signal.SIGUSR2, lambda *_: pending.append("unplug"))
        signal.signal(signal.SIGTERM, lambda *_: pending.append("stop"))
        signal.signal(signal.SIGINT, lambda *_: pending.append("stop"))
        self.start_firmware()
        self.listen()
        try:
            while True:
                while pending:
                    what = pending.pop(0)
                    if what == "stop":
                        return
                    if what == "unplug":
                        self.unplug()
                    else:
                        self.replug()
                if self.proc.poll() is not None:
                    die(f"{self.name} exited {self.proc.returncode}; see {self.state}/firmware.log")
                fds = [wake_r, self.udp] + ([self.listener] if self.listener else []) + self.clients
                ready, _, _ = select.select(fds, [], [], 1.0)
                for s in ready:
                    if s is wake_r:
                        wake_r.recv(64)
                    elif s is self.listener:
                        c, _ = self.listener.accept()
                        self.clients.append(c)
                    elif s is self.udp:
                        report = self.udp.recv(REPORT + 1)
                        # Like hidraw: every open connection reads every input report (CTAPHID's channel id
                        # tells the clients apart).
                        # A client that does not read (a connection a test left open) must not stop the
                        # bridge: a blocking send to its full buffer would hold the loop, signals included. As
                        # hidraw does, a reader whose buffer is full loses the report.
                        for c in list(self.clients):
                            try:
                                c.send(report, socket.MSG_DONTWAIT)
                            except BlockingIOError:
                                pass
                            except OSError:
                                self.drop(c)
                    elif s in self.clients:
                        try:
                            report = s.recv(REPORT + 1)
                        except OSError:
                            report = b""
                        if not report:
                            self.drop(s)
                            continue
                        if len(report) == REPORT + 1:  # a leading report id (0) as hidraw writes take it
                            report = report[1:]
                        if len(report) > 4 and report[4] & 0x80 and report[:4] != b"\xff\xff\xff\xff":
                            self.channels.add(report[:4])
                        self.udp.sendto(report.ljust(REPORT, b"\0"), ("127.0.0.1", IN_PORT))
        finally:
            self.unplug()
            self.stop_firmware()

    def drop(self, c):
        if c in self.clients:
            self.clients.remove(c)
        c.close()


def udp_port_bound(port):
    want = f":{port:04X}"
    with open("/proc/net/udp") as f:
        return any(line.split()[1].endswith(want) for line in list(f)[1:])
