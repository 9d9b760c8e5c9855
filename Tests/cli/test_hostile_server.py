"""A hostile HTTP server on loopback (written here, stdlib only) against the backend client: endless and huge
bodies, lying Content-Length, an endless trusted-facets list, stalled and dripping sockets, a plain-http host
that only looks like loopback. Peak memory of the tokenbridge child is measured with wait4 (its own rusage)."""
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import TOKENBRIDGE

BOUND = 512 << 20  # the most any hostile answer sends: enough to show an unbounded reader, not enough to hurt
CHUNK = b"A" * (1 << 20)
PEAK_RSS_LIMIT_KIB = 64 << 10
REG_PATH = "/nevisfido/uaf/1.1/request/registration"


class HostileServer:
    """Accepts on 127.0.0.1; `answers` maps a request path to a function (server, socket) that writes the answer.
    Records every request line it saw (a proxy request names the absolute URL)."""

    def __init__(self, answers):
        self.answers = answers
        self.requests = []
        self.sent = {}
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.stopping = False
        self.clients = []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.clients.append(conn)
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn):
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                data = conn.recv(65536)
                if not data:
                    return
                head += data
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            self.requests.append(line)
            method, target = line.split(" ")[:2]
            path = target.split("://", 1)[-1]
            path = "/" + path.split("/", 1)[1] if "://" in target else target
            answer = self.answers.get(path.split("?")[0])
            if answer is None:
                conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            else:
                answer(self, conn, path)
        except OSError:
            pass  # the client went away: what a capped reader should do
        finally:
            conn.close()

    def stream(self, conn, path, chunked):
        """Sends CHUNK after CHUNK until BOUND or the client disconnects; records how much went out."""
        sent = 0
        while sent < BOUND and not self.stopping:
            if chunked:
                conn.sendall(b"%x\r\n" % len(CHUNK) + CHUNK + b"\r\n")
            else:
                conn.sendall(CHUNK)
            sent += len(CHUNK)
            self.sent[path] = sent

    def stop(self):
        self.stopping = True
        self.sock.close()
        for c in self.clients:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def endless_chunked(server, conn, path):
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    server.stream(conn, path, chunked=True)


def huge_length(server, conn, path):
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (1 << 40))
    server.stream(conn, path, chunked=False)


def endless_unframed(server, conn, path):
    """HTTP/1.0 style: no length, no chunks, the body ends when the connection does (never, here)."""
    conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n")
    server.stream(conn, path, chunked=False)


def stalled(server, conn, path):
    """Reads the request, then says nothing until the client gives up."""
    conn.settimeout(120)
    while conn.recv(1024):
        pass


def dripping(server, conn, path):
    """A valid start, then one byte now and then, forever: each byte resets an idle timer."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n")
    end = time.monotonic() + 120
    while time.monotonic() < end and not server.stopping:
        conn.sendall(b" ")
        time.sleep(0.2)


def reg_request_with_app_id(app_id):
    """A registration request (UAF 1.1) whose appID makes the client fetch the trusted-facets list."""
    message = [{
        "header": {"upv": {"major": 1, "minor": 1}, "op": "Reg", "appID": app_id, "serverData": "c2Q"},
        "challenge": "Y2hhbGxlbmdlLWNoYWxsZW5nZQ", "username": "u",
        "policy": {"accepted": [[{"aaid": ["7B1D#0001"]}]]},
    }]
    body = json.dumps({"statusCode": 1200, "uafRequest": json.dumps(message), "op": "Reg"}).encode()

    def answer(server, conn, path):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                     + body)
    return answer


@pytest.fixture
def hostile():
    started = []

    def start(answers):
        s = HostileServer(answers)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def home(tmp_path):
    return {"XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "config")}


def configure(home, **settings):
    d = os.path.join(home["XDG_CONFIG_HOME"], "tokenbridge")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(settings, f)


# Linux keeps a process's peak RSS across exec (the forked copy of its parent counts), so a child forked
# straight from pytest would report pytest's own size. A small launcher forks the tokenbridge child itself and
# reports that child's peak alone (wait4); the launcher's pre-exec size is a few MiB, far below the bound.
LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
open(sys.argv[1], "w").write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_measured(tmp_path, home, *args, env=(), timeout=120):
    """Runs tokenbridge; returns (exit code, stderr, peak RSS in KiB of that child alone, via wait4)."""
    out, err = open(tmp_path / "out", "w+"), open(tmp_path / "err", "w+")
    peak_file = tmp_path / "peak"
    p = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(peak_file), TOKENBRIDGE, *args], stdout=out,
                         stderr=err, stdin=subprocess.DEVNULL, env=dict(os.environ, **home, **dict(env)),
                         start_new_session=True)
    try:
        p.wait(timeout=timeout)  # a hang guard only: no timing is asserted
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        p.wait()
    err.seek(0)
    return p.returncode, err.read(), int(peak_file.read_text()) if peak_file.exists() else -1


def register(tmp_path, home, server, **kw):
    return run_measured(tmp_path, home, "register", "--username", "u", "--server", server, **kw)


@pytest.mark.parametrize("answer", [endless_chunked, huge_length, endless_unframed])
def test_huge_uaf_answer_is_cut_off_at_1_mib(tmp_path, home, hostile, answer):
    server = hostile({REG_PATH: answer})
    code, err, peak = register(tmp_path, home, server.url)
    print(f"{answer.__name__}: peak RSS {peak} KiB, server sent {server.sent.get(REG_PATH, 0)} bytes")
    assert code == 21, err
    assert "The server's answer is longer than 1048576 bytes; nothing of it was used." in err, err
    assert peak < PEAK_RSS_LIMIT_KIB, f"peak RSS {peak} KiB"


def test_huge_trusted_facets_list_is_cut_off_at_64_kib(tmp_path, home, hostile):
    answers = {"/facets": endless_chunked}
    server = hostile(answers)
    answers[REG_PATH] = reg_request_with_app_id(server.url + "/facets")
    code, err, peak = register(tmp_path, home, server.url)
    print(f"facets: peak RSS {peak} KiB, server sent {server.sent.get('/facets', 0)} bytes")
    assert any("/facets" in r for r in server.requests), server.requests  # the list was asked for
    assert code == 23, err
    assert "The trusted-facets list could not be read: the answer is longer than 65536 bytes" in err, err
    assert peak < PEAK_RSS_LIMIT_KIB, f"peak RSS {peak} KiB"


@pytest.mark.parametrize("answer", [stalled, dripping])
def test_stalled_server_ends_in_the_network_timeout(tmp_path, home, hostile, answer):
    server = hostile({REG_PATH: answer})
    configure(home, networkTimeout=2)
    code, err, _ = register(tmp_path, home, server.url)
    assert code == 21, err
    assert f"The server did not answer in time ({server.url}{REG_PATH})." in err, err


@pytest.mark.parametrize("host", ["127.evil.example", "127.0.0.1.nip.io", "0x7f.0.0.1", "127.1", "localhost."])
def test_plain_http_needs_a_real_loopback_host(tmp_path, home, hostile, host):
    # Every request would go through this "proxy" (libcurl honours http_proxy): it must see none.
    proxy = hostile({})
    server = f"http://{host}:{proxy.port}"
    env = {"http_proxy": proxy.url, "HTTP_PROXY": proxy.url, "no_proxy": "", "NO_PROXY": ""}
    code, err, _ = register(tmp_path, home, server, env=env)
    assert code == 27, err
    assert f"{server}: only https:// servers (http:// only on this machine's loopback" in err, err
    time.sleep(0.2)  # a connection the client made would have been accepted and read by now
    assert proxy.requests == []
