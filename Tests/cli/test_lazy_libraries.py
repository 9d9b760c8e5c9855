"""Libraries loaded when a command needs them, not at start-up (`tokenbridge --version` maps no HTTP, TLS, QR or
image library, and no token or database library: libfido2, libpcsclite, libusb, libcrypto, libsqlite3 are loaded
at their first use, a missing one is a clear error), and the HTTP transport: libcurl loaded at the first request, TLS verified against the system trust store (an untrusted or misnamed certificate is refused before
any request is sent), and a clear error when libcurl is missing. Servers on loopback only; the trusted-CA and
missing-library cases run the client in a mount namespace of their own with a file bound over the system's
(the CA bundle, the library), so the product has no test-only trust setting."""
import glob
import json
import os
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import zlib

import pytest

from conftest import ROOT, TOKENBRIDGE, tb
from fido2_conn import Key

REG_PATH = "/nevisfido/uaf/1.1/request/registration"


@pytest.fixture
def home(tmp_path):
    return {"XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "config")}


def run(home, *args, env=(), prefix=()):
    return subprocess.run([*prefix, TOKENBRIDGE, *args], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, **home, **dict(env)), stdin=subprocess.DEVNULL, start_new_session=True)


def register(home, server, **kw):
    return run(home, "register", "--username", "u", "--server", server, **kw)


class Server:
    """HTTP(S) on 127.0.0.1: every request is answered 500; records the request lines it read, and for TLS
    whether any handshake completed."""

    def __init__(self, tls=None):
        self.tls = tls
        self.requests = []
        self.handshakes = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn):
        try:
            conn.settimeout(30)
            if self.tls:
                conn = self.tls.wrap_socket(conn, server_side=True)
                self.handshakes += 1
            head = b""
            while b"\r\n\r\n" not in head:
                data = conn.recv(65536)
                if not data:
                    return
                head += data
            self.requests.append(head.split(b"\r\n", 1)[0].decode("latin-1"))
            conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        except (OSError, ssl.SSLError):
            pass  # the client refused the certificate
        finally:
            conn.close()

    def stop(self):
        self.sock.close()


@pytest.fixture
def servers():
    started = []

    def start(tls=None):
        s = Server(tls)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def pki(tmp_path):
    """A CA and a server certificate it signed for IP 127.0.0.1 only (not for the name localhost)."""
    d = tmp_path / "pki"
    d.mkdir()
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=TokenBridge test CA",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign", cwd=d)
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1", cwd=d)
    (d / "ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "2", "-extfile", "ext", cwd=d)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(d / "server.pem", d / "server.key")
    return d, ctx


def with_binds(binds):
    """A command prefix: a private mount namespace where each (file, over) pair is bound (file over `over`)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare for a private mount namespace")
    script = "".join(f'mount --bind "{src}" "{dst}" && ' for src, dst in binds) + 'exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]


def system_ca_bundle():
    """Where this system's libcurl reads its trust store (curl-config --ca), e.g. /etc/ssl/certs/ca-certificates.crt."""
    path = subprocess.run(["curl-config", "--ca"], capture_output=True, text=True).stdout.strip()
    if not path or not os.path.isfile(path):
        pytest.skip("no system CA bundle file to bind over")
    return path


def loaded_libraries(home, *args, env=(), **kw):
    """The shared objects the dynamic loader maps for `tokenbridge ARGS` (LD_DEBUG=files), and the result."""
    r = run(home, *args, env={"LD_DEBUG": "files", **dict(env)}, **kw)
    return {line.split("file=", 1)[1].split()[0] for line in r.stderr.splitlines() if "file=" in line}, r


LAZY = ("libcurl", "libgnutls", "libnghttp2", "libssh2", "libzbar", "libX11", "libdbus", "libv4l", "libpng", "libjpeg")


def test_version_maps_no_http_or_image_library(home):
    libs, r = loaded_libraries(home, "--version")
    assert r.returncode == 0, r.stderr
    assert libs, "LD_DEBUG=files printed nothing: the check would see nothing"
    assert not [l for l in libs if l.startswith(LAZY)], sorted(libs)


def blank_png(path):
    """An 8x8 white grayscale PNG (no QR code in it)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\0" + bytes([255] * 8) for _ in range(8))
    ihdr = struct.pack(">IIBBBBB", 8, 8, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    return str(path)


def test_qr_libraries_are_loaded_at_the_first_scan(home, tmp_path):
    libs, r = loaded_libraries(home, "oob", "--qr-image", blank_png(tmp_path / "blank.png"), "--decode-only")
    assert r.returncode == 31 and "No QR code was found in the image" in r.stderr, r.stderr
    assert {"libzbar.so.0", "libpng16.so.16"} <= libs, sorted(libs)


def test_missing_qr_library_is_a_clear_error(home, tmp_path):
    found = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    [zbar] = {line.split("=>")[1].strip() for line in found.splitlines()
              if line.strip().startswith("libzbar.so.0 ") and "x86-64" in line}
    r = run(home, "oob", "--qr-image", blank_png(tmp_path / "blank.png"), "--decode-only",
            prefix=with_binds([("/dev/null", zbar)]))
    assert r.returncode == 1, r.stderr
    assert "tokenbridge: QR images cannot be read: " in r.stderr and "libzbar.so.0" in r.stderr, r.stderr
    assert "(Debian: apt install libzbar0 libpng16-16 libjpeg62-turbo)." in r.stderr, r.stderr


def test_libcurl_is_loaded_at_the_first_request(home, servers):
    server = servers()
    libs, r = loaded_libraries(home, "register", "--username", "u", "--server", f"http://127.0.0.1:{server.port}")
    assert r.returncode == 21 and "The server answered HTTP 500." in r.stderr, r.stderr
    assert server.requests == [f"POST {REG_PATH} HTTP/1.1"]
    assert [l for l in libs if l.startswith("libcurl")], sorted(libs)


def test_https_to_an_untrusted_certificate_is_refused(home, servers, pki):
    server = servers(pki[1])
    r = register(home, f"https://127.0.0.1:{server.port}")
    assert r.returncode == 21, r.stderr
    assert "tokenbridge: The server cannot be reached: 127.0.0.1: SSL certificate problem" in r.stderr, r.stderr
    assert server.requests == [] and server.handshakes == 0


def test_https_with_the_ca_in_the_system_trust_store_is_accepted(home, servers, pki):
    server = servers(pki[1])
    prefix = with_binds([(pki[0] / "ca.pem", system_ca_bundle())])
    r = register(home, f"https://127.0.0.1:{server.port}", prefix=prefix)
    assert r.returncode == 21 and "The server answered HTTP 500." in r.stderr, r.stderr
    assert server.requests == [f"POST {REG_PATH} HTTP/1.1"]


def test_https_to_a_certificate_for_another_name_is_refused(home, servers, pki):
    # Trusted CA, but the certificate names 127.0.0.1 only: "localhost" does not match it.
    server = servers(pki[1])
    prefix = with_binds([(pki[0] / "ca.pem", system_ca_bundle())])
    r = register(home, f"https://localhost:{server.port}", prefix=prefix)
    assert r.returncode == 21, r.stderr
    assert "tokenbridge: The server cannot be reached: localhost: " in r.stderr, r.stderr
    assert "localhost" in r.stderr.split("localhost: ", 1)[1], r.stderr  # curl names the host it did not match
    assert server.requests == []


def test_missing_libcurl_is_a_clear_error(home, servers):
    server = servers()
    found = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    libs = {line.split("=>")[1].strip() for line in found.splitlines()
            if line.strip().startswith(("libcurl.so.4 ", "libcurl-gnutls.so.4 ")) and "x86-64" in line}
    if not libs:
        pytest.skip("no libcurl on this machine to hide")
    r = register(home, f"http://127.0.0.1:{server.port}", prefix=with_binds([("/dev/null", l) for l in libs]))
    assert r.returncode == 21, r.stderr
    assert "tokenbridge: Not contacted: libcurl cannot be loaded (" in r.stderr, r.stderr
    assert "HTTP needs libcurl 7.85 or newer (Debian: apt install libcurl4)." in r.stderr, r.stderr
    assert server.requests == []


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["tokens", "--help"], ["register", "--help"]])
def test_version_and_help_open_nothing(home, tmp_path, args):
    """No SQLite file, no pcscd socket, no hidraw node, no socket at all: what --version and --help need is in the
    binary (strace records every open and socket call of the process)."""
    if not shutil.which("strace"):
        pytest.skip("strace is not installed (Tools/setup installs it)")
    for d in home.values():
        os.makedirs(d, exist_ok=True)
    trace = tmp_path / "trace"
    r = run(home, *args, prefix=["strace", "-f", "-qq", "-o", str(trace), "-e", "trace=openat,open,socket,connect"])
    assert r.returncode == 0, r.stderr
    calls = trace.read_text().splitlines()
    assert any("openat(" in c for c in calls), calls  # the trace saw the loader's opens: it would see others
    assert not [c for c in calls if "socket(" in c or "connect(" in c], calls
    opened = [c for c in calls if "openat(" in c or "open(" in c]
    assert not [c for c in opened if any(d in c for d in home.values()) or "/dev/" in c or "pcscd" in c], opened


# Loaded at first use by Sources/CLazy (the binary does not link them); libudev, libcbor come with libfido2.
TOKEN_LIBRARIES = ("libfido2", "libpcsclite", "libusb-1.0", "libcrypto", "libsqlite3", "libcbor", "libudev")


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["accounts", "--json"]])
def test_commands_map_no_token_library_they_do_not_need(home, args):
    libs, r = loaded_libraries(home, *args)
    assert r.returncode == 0, r.stderr
    assert libs, "LD_DEBUG=files printed nothing: the check would see nothing"
    needed = ("libsqlite3",) if args[0] == "accounts" else ()  # the local data: SQLite, nothing else
    assert not [l for l in libs if l.startswith(TOKEN_LIBRARIES) and not l.startswith(needed)], sorted(libs)


def test_pin_status_of_a_card_loads_pcsclite(home, card):
    libs, r = loaded_libraries(home, "pin", "status")
    assert r.returncode == 0 and "PIN: 3 tries left" in r.stdout, r.stdout + r.stderr
    assert "libpcsclite.so.1" in libs, sorted(libs)
    assert not [l for l in libs if l.startswith(("libsqlite3", "libusb-1.0"))], sorted(libs)


def fido_hidraw_present():
    """A hidraw node of this machine whose report descriptor starts with the FIDO usage page (06 D0 F1)."""
    for d in glob.glob("/sys/class/hidraw/*/device/report_descriptor"):
        try:
            if open(d, "rb").read(3) == b"\x06\xd0\xf1":
                return d
        except OSError:
            pass
    return None


def test_a_card_command_loads_no_libfido2_when_no_key_can_be_present(home, card):
    """No virtual key and no FIDO hidraw node: libfido2 would find nothing, so it is not loaded to look."""
    node = fido_hidraw_present()
    if node:
        pytest.skip(f"a FIDO key is attached to this machine ({node}): libfido2 is loaded to list it")
    libs, r = loaded_libraries(home, "pin", "status", env={"TOKENBRIDGE_VIRTUAL_FIDO": ""})
    assert r.returncode == 0 and "PIN: 3 tries left" in r.stdout, r.stdout + r.stderr
    assert "libpcsclite.so.1" in libs, sorted(libs)
    assert not [l for l in libs if l.startswith(("libfido2", "libcrypto", "libcbor", "libudev"))], sorted(libs)


@pytest.fixture
def key(tmp_path):
    k = Key(tmp_path)
    yield k
    k.stop()


def test_a_fido2_command_loads_libfido2_and_a_piv_command_does_not(home, key, card):
    """Every exchange with a FIDO2 key goes through libfido2: a FIDO2 command loads it; a command about a PIV card alone
    does not, even with a key present."""
    libs, r = loaded_libraries(home, "fido2", "info", "--json", env={"TOKENBRIDGE_VIRTUAL_FIDO": key.sock})
    assert r.returncode == 0 and json.loads(r.stdout)["aaguid"], r.stdout + r.stderr
    assert "libfido2.so.1" in libs, sorted(libs)
    libs, r = loaded_libraries(home, "pin", "status", "--token", card.id)
    assert r.returncode == 0, r.stdout + r.stderr
    assert libs, "LD_DEBUG=files printed nothing: the check would see nothing"
    assert not [l for l in libs if l.startswith(("libfido2", "libcbor"))], sorted(libs)


# Logs each exit-time function registered (glibc's __cxa_atexit, which atexit() calls) by its symbol name.
EXIT_LOG_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
int __cxa_atexit(void (*f)(void *), void *arg, void *dso) {
  int (*real)(void (*)(void *), void *, void *) = (int (*)(void (*)(void *), void *, void *))dlsym(RTLD_NEXT, "__cxa_atexit");
  Dl_info info;
  const char *path = getenv("EXIT_LOG");
  FILE *log = path ? fopen(path, "a") : NULL;
  if (log) {
    fprintf(log, "%s\n", dladdr((void *)f, &info) && info.dli_sname ? info.dli_sname : "?");
    fclose(log);
  }
  return real(f, arg, dso);
}
"""


def test_libcrypto_has_no_clean_up_at_exit(home, tmp_path, monkeypatch):
    """OpenSSL's clean-up at exit frees libcrypto's state inside exit() while other threads may still use it or be
    ending (a crash, seen in the simulator as it stopped): the client and the simulator set libcrypto up without it,
    also when libfido2 and libcurl call into libcrypto. Checked by what each process registers to run at exit."""
    shim = tmp_path / "exit_log.so"
    src = tmp_path / "exit_log.c"
    src.write_text(EXIT_LOG_SHIM)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(shim), str(src), "-ldl"], check=True)
    # The check sees the clean-up when it is there: openssl(1) sets libcrypto up with it.
    seen = tmp_path / "openssl.log"
    subprocess.run(["openssl", "dgst", "-sha256", os.devnull], check=True, capture_output=True,
                   env=dict(os.environ, LD_PRELOAD=str(shim), EXIT_LOG=str(seen)))
    assert "OPENSSL_cleanup" in seen.read_text().split(), seen.read_text()

    from relying_party import RelyingParty
    server = RelyingParty(tmp_path)
    key_log, client_log = tmp_path / "key.log", tmp_path / "client.log"
    with monkeypatch.context() as m:  # the simulator inherits the environment
        m.setenv("LD_PRELOAD", str(shim))
        m.setenv("EXIT_LOG", str(key_log))
        k = Key(tmp_path)
    try:
        env = {**home, "TOKENBRIDGE_VIRTUAL_FIDO": k.sock, "LD_PRELOAD": str(shim), "EXIT_LOG": str(client_log)}
        # libfido2 (ECDH, AES, HMAC for the PIN), libcurl and the client's own hashes and signatures.
        assert tb("pin", "set", env=env, pins=["1234"]).returncode == 0
        r = tb("register", "--username", "alice", "--server", server.url, env=env, pins=["1234"])
        assert r.returncode == 0, r.stderr
        assert len(server.registrations()) == 1
    finally:
        server.stop()
        k.stop()
    assert k.proc.returncode == 0
    for log in (client_log, key_log):
        names = log.read_text().split()
        assert names, f"{log.name}: nothing registered at exit was seen (the check would see nothing)"
        assert "OPENSSL_cleanup" not in names, (log.name, names)


def library_file(soname):
    """The file the dynamic loader finds for `soname` (ldconfig's cache), to hide it with a bind mount."""
    found = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    files = {line.split("=>")[1].strip() for line in found.splitlines()
             if line.strip().startswith(soname + " ") and "x86-64" in line}
    if not files:
        pytest.skip(f"no {soname} on this machine to hide")
    return sorted(files)


def hiding(soname):
    return with_binds([("/dev/null", f) for f in library_file(soname)])


def test_missing_libfido2_is_a_clear_error(home, key):
    """Without libfido2 no FIDO2 key can be used: that is said before any PIN, naming the package."""
    hidden = hiding("libfido2.so.1")
    for command in (["pin", "status"], ["fido2", "credentials", "list"]):
        r = run(home, *command, env={"TOKENBRIDGE_VIRTUAL_FIDO": key.sock}, prefix=hidden)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "libfido2.so.1 cannot be loaded (" in r.stderr, r.stderr
        assert "FIDO2 keys need it (Debian: apt install libfido2-1)" in r.stderr, r.stderr


def test_missing_libfido2_leaves_smart_cards_usable(home, card):
    r = run(home, "pin", "status", prefix=hiding("libfido2.so.1"))
    assert r.returncode == 0 and "PIN: 3 tries left" in r.stdout, r.stdout + r.stderr


def test_tokens_without_libfido2_lists_the_card_and_says_why_the_key_is_not(home, card, key):
    hidden = hiding("libfido2.so.1")
    r = run(home, "tokens", env={"TOKENBRIDGE_VIRTUAL_FIDO": key.sock}, prefix=hidden)
    assert r.returncode == 0 and card.id in r.stdout, r.stdout + r.stderr
    assert key.sock in r.stdout + r.stderr and "libfido2.so.1 cannot be loaded" in r.stdout + r.stderr, \
        r.stdout + r.stderr


def test_missing_libpcsclite_is_a_clear_error(home, card):
    r = run(home, "pin", "status", prefix=hiding("libpcsclite.so.1"))
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("tokenbridge: libpcsclite.so.1 cannot be loaded ("), r.stderr
    assert "smart cards (PC/SC) need it (Debian: apt install libpcsclite1). Nothing was done." in r.stderr, r.stderr


def test_missing_libsqlite3_is_a_clear_error(home):
    r = run(home, "accounts", "--json", prefix=hiding("libsqlite3.so.0"))
    assert r.returncode == 1, r.stdout + r.stderr
    error = json.loads(r.stdout)  # --json: the error as JSON on stdout
    assert error["exitCode"] == "1" and error["error"].startswith("libsqlite3.so.0 cannot be loaded ("), error
    assert error["error"].endswith("; the local data needs it (Debian: apt install libsqlite3-0). Nothing was done.")


def test_forwarding_definitions_are_generated_from_the_current_sources():
    """Sources/CLazy/lazy_functions.c is what Tools/gen-lazy makes of today's sources and headers (a function the
    client started to call is a link error; one it stopped calling, or a changed header, shows here)."""
    r = subprocess.run([str(ROOT / "Tools" / "gen-lazy"), "--check"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_missing_libcrypto_is_a_clear_error_before_the_management_key_is_used(home, card):
    # libcrypto is only for the PIV management key's 3DES/AES (libfido2 needs it too: the card is still found).
    r = run(home, "key", "generate", "--slot", "9c", prefix=hiding("libcrypto.so.3"))
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("tokenbridge: libcrypto.so.3 cannot be loaded ("), r.stderr
    assert "hashes, signatures and the PIV management key need it (Debian: apt install libssl3). Nothing was done." in (
        r.stderr), r.stderr
    assert run(home, "key", "public", "--slot", "9c").returncode != 0  # no key was generated


def test_missing_libcrypto_is_a_clear_error_before_a_signature(home, card, tmp_path):
    """A signature hashes its message with libcrypto: without it, the command says so before any PIN is asked."""
    message = tmp_path / "message"
    message.write_bytes(b"hello")
    r = run(home, "key", "sign", "--slot", "9a", "--input", str(message), "--output", str(tmp_path / "sig"),
            prefix=hiding("libcrypto.so.3"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.startswith("tokenbridge: libcrypto.so.3 cannot be loaded ("), r.stderr
    assert "(Debian: apt install libssl3). Nothing was done." in r.stderr, r.stderr
    assert "PIN" not in r.stderr and not (tmp_path / "sig").exists()
