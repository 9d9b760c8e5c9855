"""A python-fido2 CtapHidConnection over virtual-token fido2's Unix socket (one datagram = one HID report)."""
import os
import signal
import socket
import subprocess
import time
from fido2.ctap2 import Ctap2
from fido2.hid import CtapHidDevice
from fido2.hid.base import CtapHidConnection, HidDescriptor

class SocketConnection(CtapHidConnection):
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.connect(path)
        self.sock.settimeout(10)
    def read_packet(self):
        return self.sock.recv(64)
    def write_packet(self, data):
        self.sock.send(bytes(data))
    def close(self):
        self.sock.close()

def open_device(path):
    d = HidDescriptor(path, 0, 0, 64, 64, "virtual-token fido2", None)
    return CtapHidDevice(d, SocketConnection(path))


class Key:
    def __init__(self, tmp_path, *args):
        self.sock = str(tmp_path / "fido.sock")
        self.state = str(tmp_path / "fido.json")
        self.args = args
        self.start()

    def start(self):
        self.proc = subprocess.Popen([_virtual_token(), "fido2", "--socket", self.sock, "--state", self.state, *self.args],
                                     stderr=open(self.sock + ".log", "a"))
        _wait_until(lambda: os.path.exists(self.sock), "virtual FIDO2 socket")

    def ctap(self):
        return Ctap2(open_device(self.sock))

    def replug(self):
        """SIGUSR1: the socket file goes (unplug) and a listening one is renamed into place (plug)."""
        def stamp():
            try:
                st = os.stat(self.sock)
                return st.st_ino, st.st_ctime_ns  # an inode number may be reused; with its ctime it is new
            except FileNotFoundError:
                return None
        before = stamp()
        self.proc.send_signal(signal.SIGUSR1)
        _wait_until(lambda: stamp() not in (None, before), "virtual FIDO2 replug")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)




def _virtual_token():
    from conftest import VIRTUAL_TOKEN
    return VIRTUAL_TOKEN


def _wait_until(pred, what):
    from conftest import wait_until
    wait_until(pred, what)
