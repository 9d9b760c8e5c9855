"""A python-fido2 CtapHidConnection over virtual-token fido2's Unix socket (one datagram = one HID report)."""
import socket
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
