"""Web pages reach the token: navigator.fido.uaf (FIDO UAF DOM API) in headless Chromium and Firefox ESR with the
extension (browser/extension), its native-messaging host (`tokenbridge browser-host`) and `tokenbridge serve` on a
private bus (test_dbus_service's fixture). The page is served over HTTPS on loopback with a certificate made here
(the browsers are told to accept it); the relying party is Tools/rp, trusting the page's origin. PINs come from the
scripted pinentry. The host itself is also tested directly: who may start it, and the frames it refuses."""
import datetime
import ipaddress
import json
import os
import ssl
import struct
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

import browsers
from conftest import TOKENBRIDGE, wait_until
from implementations import UAFToken
from test_dbus_service import Bus, bus, home, pinentry_log, scenario  # noqa: F401 (fixtures)
from test_uaf import rp as rps  # noqa: F401 (fixture)

TOKENBRIDGE_REAL = os.path.realpath(TOKENBRIDGE)
CHROMIUM_ORIGIN = "chrome-extension://hfnmlfnggfigafmgljnljmddoofhjjgn/"
GECKO_ID = "uaf@tokenbridge.org"

PAGE = b"""<!doctype html><meta charset="utf-8"><title>TokenBridge UAF test page</title>
<script>
window.tbResults = {};
window.tb = {
  call(method, message, responseCode) {
    return new Promise((resolve) => {
      const uaf = navigator.fido.uaf, m = {uafProtocolMessage: message};
      if (method === "discover") uaf.discover((d) => resolve({ok: d}), (c) => resolve({error: c}));
      else if (method === "checkPolicy") uaf.checkPolicy(m, (c) => resolve({error: c}));
      else if (method === "processUAFOperation")
        uaf.processUAFOperation(m, (r) => resolve({ok: r}), (c) => resolve({error: c}));
      else { uaf.notifyUAFResult(responseCode, m); resolve({}); }
    });
  },
  start(key, ...args) { tb.call(...args).then((r) => { tbResults[key] = r; }); },
  // A message written by the page itself, claiming an origin: the extension must not take it.
  forged(message, origin) {
    return new Promise((resolve) => {
      addEventListener("message", (e) => {
        if (e.source === window && e.data && e.data.channel === "tokenbridge-uaf-reply" && e.data.callId === "f")
          resolve({error: e.data.reply.errorCode});
      });
      postMessage({channel: "tokenbridge-uaf-request", callId: "f", method: "checkPolicy",
                   uafProtocolMessage: message, origin, facetID: origin}, location.origin);
    });
  },
};
</script>
"""
CALL = "window.tb.call(arguments[0], arguments[1], arguments[2]).then(arguments[arguments.length - 1])"


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args):
        pass


def self_signed(tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tokenbridge test page")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .sign(key, hashes.SHA256()))
    (tmp_path / "page.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return tmp_path / "page.pem"


class Pages:
    """The test page on https://127.0.0.1:P (the relying party's trusted origin), the same server as
    https://localhost:P (another origin, not trusted) and on http://127.0.0.1:Q (not secure)."""

    def __init__(self, tmp_path):
        self.servers = []
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self_signed(tmp_path))
        tls = self.serve(ctx)
        plain = self.serve(None)
        self.origin = f"https://127.0.0.1:{tls}"
        self.other_origin = f"https://localhost:{tls}"
        self.insecure = f"http://127.0.0.1:{plain}"

    def serve(self, ctx):
        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if ctx:
            server.socket = ctx.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.servers.append(server)
        return server.server_address[1]

    def stop(self):
        for s in self.servers:
            s.shutdown()
            s.server_close()


@pytest.fixture
def pages(tmp_path):
    p = Pages(tmp_path)
    yield p
    p.stop()


def allow_host(tmp_path):
    """The configuration that lets the host act for web origins (README, "Web pages")."""
    (tmp_path / "config" / "tokenbridge" / "config.json").write_text(
        json.dumps({"serviceOriginCallers": ["unix:exe:" + TOKENBRIDGE_REAL]}))


@pytest.fixture(params=["chromium", "firefox"])
def browser(request, tmp_path):
    """A started browser (its env names the private bus: set `browser.bus_env` before use via the factory)."""
    missing = browsers.available(request.param)
    if missing:
        pytest.skip(missing)
    started = []

    def start(env):
        b = browsers.BROWSERS[request.param](tmp_path, browsers.host_wrapper(tmp_path, TOKENBRIDGE), env)
        started.append(b)
        return b

    start.name = request.param
    yield start
    for b in started:
        b.quit()


def page(b, url, new_tab=False):
    handle = b.open(url + "/uaf.html", new_tab=new_tab)
    browsers.wait_for_api(b)
    return handle


@pytest.mark.parametrize("kind", ["piv-virtual", "fido2-virtual"])
def test_register_authenticate_deregister_from_a_page(kind, browser, request, cards, monkeypatch, bus, rps, pages,
                                                      scenario, tmp_path):
    token = UAFToken(kind, request, tmp_path, cards, monkeypatch)
    server = rps("--facet", pages.origin)
    allow_host(tmp_path)
    b_bus = bus(token.env, start=False)
    # D-Bus activation starts the service for the host's first call.
    (b_bus.services / "org.tokenbridge.TokenBridge1.service").write_text(
        f"[D-BUS Service]\nName=org.tokenbridge.TokenBridge1\nExec={TOKENBRIDGE} serve --idle-timeout 120\n")
    b = browser({"DBUS_SESSION_BUS_ADDRESS": b_bus.address})
    page(b, pages.origin)

    found = b.run_async(CALL, "discover", None, None)
    data = found["ok"]
    assert data["clientVendor"] == "TokenBridge" and {"major": 1, "minor": 1} in data["supportedUAFVersions"]
    assert [a["aaid"] for a in data["availableAuthenticators"]] == [token.aaid]

    scenario(["123456"])
    reg = server.request("Reg", username="alice")["uafRequest"]
    assert b.run_async(CALL, "checkPolicy", reg, None) == {"error": 0}
    r = b.run_async(CALL, "processUAFOperation", reg, None)
    assert "ok" in r, r
    assert server.respond("Reg", r["ok"]["uafProtocolMessage"]) == 1200
    assert [x["aaid"] for x in server.registrations()] == [token.aaid]
    b.run_async(CALL, "notifyUAFResult", r["ok"]["uafProtocolMessage"], 1200)
    log = pinentry_log(tmp_path)
    assert f"App: {pages.origin}" in log and f"Server: {server.url}" in log, log

    scenario(["123456"])
    auth = server.request("Auth", username="alice", transaction="Pay 10 CHF\x1b[2J to Bob")["uafRequest"]
    r = b.run_async(CALL, "processUAFOperation", auth, None)
    assert "ok" in r, r
    assert server.respond("Auth", r["ok"]["uafProtocolMessage"]) == 1200
    assert "Confirm: Pay 10 CHF\\u{1B}[2J to Bob" in pinentry_log(tmp_path)

    scenario([])
    r = b.run_async(CALL, "processUAFOperation", server.request("Dereg", username="alice")["uafRequest"], None)
    assert r == {"ok": {"uafProtocolMessage": ""}}, r
    listed = subprocess.run([TOKENBRIDGE, "authenticators", "--json"], capture_output=True, text=True,
                            env=dict(os.environ, **b_bus.env), timeout=60)
    assert json.loads(listed.stdout) == []


def test_refusals_in_the_page(browser, card, bus, rps, pages, scenario, tmp_path):
    """http → INSECURE_TRANSPORT; an origin the server does not trust → UNTRUSTED_FACET_ID before any dialog; an
    origin the page writes into its own message is ignored; two tabs at once each get their own answer."""
    server = rps("--facet", pages.origin)
    allow_host(tmp_path)
    b_bus = bus()
    b = browser({"DBUS_SESSION_BUS_ADDRESS": b_bus.address})
    reg = server.request("Reg", username="alice")["uafRequest"]

    page(b, pages.insecure)
    assert b.run_async(CALL, "checkPolicy", reg, None) == {"error": 2}
    assert b.run_async(CALL, "processUAFOperation", reg, None) == {"error": 2}
    assert b.run_async(CALL, "discover", None, None) == {"error": 2}

    untrusted = page(b, pages.other_origin)
    assert b.run_async(CALL, "checkPolicy", reg, None) == {"error": 7}
    assert b.run_async(CALL, "processUAFOperation", reg, None) == {"error": 7}
    # The page claims the trusted origin in a message of its own: the browser's origin is used, still untrusted.
    assert b.run_async("window.tb.forged(arguments[0], arguments[1]).then(arguments[2])", reg, pages.origin) == \
        {"error": 7}
    assert pinentry_log(tmp_path) == ""  # refused before any dialog

    # Two tabs at once: the trusted tab's registration waits in its PIN dialog while the untrusted tab is answered,
    # then each gets its own answer.
    release = tmp_path / "release-pin"
    scenario([f"@wait:{release}:123456"])
    trusted = page(b, pages.origin, new_tab=True)
    b.run("window.tb.start('reg', 'processUAFOperation', arguments[0])", reg)
    wait_until(lambda: "GETPIN" in pinentry_log(tmp_path), "the PIN dialog of the trusted tab", timeout=60)
    b.switch(untrusted)
    b.run("window.tb.start('busy', 'processUAFOperation', arguments[0])", reg)
    b.run("window.tb.start('discover', 'discover')")
    wait_until(lambda: b.run("return Object.keys(window.tbResults).length") == 2, "the untrusted tab's answers",
               timeout=60)
    answers = b.run("return window.tbResults")
    # One operation at a time (INSUFFICIENT_AUTHENTICATOR_RESOURCES); Discover does not wait for it.
    assert answers["busy"] == {"error": 15} and answers["discover"]["ok"]["clientVendor"] == "TokenBridge"
    b.switch(trusted)
    assert b.run("return window.tbResults") == {}
    release.write_text("")
    wait_until(lambda: b.run("return window.tbResults.reg") is not None, "the registration's answer", timeout=60)
    r = b.run("return window.tbResults.reg")
    assert "ok" in r, r
    # The server refuses it (1498): notifyUAFResult lets the client drop the registration it kept.
    env = dict(os.environ, **b_bus.env)
    rows = lambda: json.loads(subprocess.run([TOKENBRIDGE, "authenticators", "--json"], capture_output=True,  # noqa
                                             text=True, env=env, timeout=60).stdout)
    assert len(rows()) == 1
    b.run_async(CALL, "notifyUAFResult", r["ok"]["uafProtocolMessage"], 1498)
    wait_until(lambda: rows() == [], "the refused registration dropped", timeout=30)


def test_the_host_needs_the_origin_caller_configuration(browser, card, bus, rps, pages, tmp_path):
    """Without serviceOriginCallers naming the host, the service refuses it an origin
    (AUTHENTICATOR_ACCESS_DENIED)."""
    server = rps("--facet", pages.origin)
    b = browser({"DBUS_SESSION_BUS_ADDRESS": bus().address})
    page(b, pages.origin)
    assert b.run_async(CALL, "checkPolicy", server.request("Reg", username="a")["uafRequest"], None) == \
        {"error": 12}


# The host binary, directly: what a browser passes, and the frames it must survive.

def frame(obj):
    data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return struct.pack("=I", len(data)) + data


def replies(out):
    got = []
    while out:
        (n,), out = struct.unpack("=I", out[:4]), out[4:]
        got.append(json.loads(out[:n]))
        out = out[n:]
    return got


def host(args, data, env=None):
    return subprocess.run([TOKENBRIDGE, "browser-host", *args], input=data, capture_output=True, timeout=60,
                          env=dict(os.environ, **(env or {})))


FIREFOX_ARGS = ["/usr/lib/mozilla/native-messaging-hosts/org.tokenbridge.uaf.json", GECKO_ID]


@pytest.mark.parametrize("args", [[], ["chrome-extension://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/"],
                                  ["/tmp/x.json", "evil@example.org"], [CHROMIUM_ORIGIN.rstrip("/")],
                                  ["/tmp/other.json", GECKO_ID]])
def test_the_host_refuses_other_callers(args):
    r = host(args, frame({"id": 1, "method": "discover", "origin": "https://a.example"}))
    assert r.returncode == 1 and r.stdout == b"" and b"refused" in r.stderr


def test_the_host_refuses_bad_frames(bus, tmp_path):
    env = {"DBUS_SESSION_BUS_ADDRESS": bus().address}
    allow_host(tmp_path)
    ok = frame({"id": 1, "method": "discover", "origin": "https://127.0.0.1:1"})
    # EOF between frames: a clean end, every call answered.
    for args in ([CHROMIUM_ORIGIN], FIREFOX_ARGS):
        r = host(args, ok, env)
        assert r.returncode == 0, r.stderr
        [answer] = replies(r.stdout)
        assert answer["id"] == 1 and answer["errorCode"] == 0 and answer["discoveryData"]["clientVendor"]
    assert host([CHROMIUM_ORIGIN], b"", env).returncode == 0
    # Truncated (in the header, in the body), oversized, not JSON, no id: the host ends, answering what came before.
    for bad in (b"\x05\x00", frame({"id": 2})[:-3], struct.pack("=I", (1 << 20) + 1) + b"{}",
                struct.pack("=I", 0xFFFFFFFF), frame(b"{not json"), frame(b"\xff\xfe"), frame([1, 2]),
                frame({"method": "discover"}), frame({"id": -1, "method": "discover"}), frame(b"")):
        r = host([CHROMIUM_ORIGIN], ok + bad + ok, env)
        assert r.returncode == 1, (bad, r.stderr)
        assert [a["id"] for a in replies(r.stdout)] == [1], bad
    # A well-formed call the host cannot take is answered by its id, and the host goes on.
    calls = [{"id": 3, "method": "bogus", "origin": "https://127.0.0.1:1"},
             {"id": 4, "method": "discover", "origin": "http://127.0.0.1:1"},
             {"id": 5, "method": "discover", "origin": "https://a.example/path"},
             {"id": 6, "method": "checkPolicy", "origin": "https://a.example"},
             {"id": 7, "method": "notifyUAFResult", "origin": "https://a.example", "uafProtocolMessage": "[]"}]
    r = host([CHROMIUM_ORIGIN], b"".join(frame(c) for c in calls) + ok, env)
    assert r.returncode == 0, r.stderr
    assert [(a["id"], a["errorCode"]) for a in replies(r.stdout)] == [(3, 6), (4, 2), (5, 7), (6, 6), (7, 6), (1, 0)]
    # A frame of exactly the bound is read (and refused as a request, by its id).
    big = b'{"id": 8, "method": "checkPolicy", "origin": "https://a.example", "uafProtocolMessage": "'
    big += b"x" * ((1 << 20) - len(big) - 2) + b'"}'
    r = host([CHROMIUM_ORIGIN], frame(big), env)
    assert r.returncode == 0 and replies(r.stdout)[0]["id"] == 8, r.stderr


def test_the_host_without_a_bus_answers_every_call():
    r = host([CHROMIUM_ORIGIN], frame({"id": 9, "method": "discover", "origin": "https://a.example"}),
             {"DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent/bus"})
    assert r.returncode == 0 and replies(r.stdout) == [{"id": 9, "errorCode": 255}], r.stderr


def test_manifests_agree_on_the_ids():
    """The extension's key gives the Chromium id the host manifests allow and the host accepts."""
    import base64
    import hashlib
    manifest = json.loads((browsers.EXTENSION / "manifest.json").read_text())
    digest = hashlib.sha256(base64.b64decode(manifest["key"])).hexdigest()[:32]
    ext_id = "".join(chr(ord("a") + int(c, 16)) for c in digest)
    assert f"chrome-extension://{ext_id}/" == CHROMIUM_ORIGIN
    assert manifest["browser_specific_settings"]["gecko"]["id"] == GECKO_ID
    assert browsers.host_manifest("chromium", "/x")["allowed_origins"] == [CHROMIUM_ORIGIN]
    assert browsers.host_manifest("firefox", "/x")["allowed_extensions"] == [GECKO_ID]


def test_install_for_one_user_and_system_wide(tmp_path):
    from conftest import ROOT
    home, config = tmp_path / "home", tmp_path / "home" / "cfg"
    (config / "tokenbridge").mkdir(parents=True)
    (config / "tokenbridge" / "config.json").write_text('{"pinentry": "pinentry-tty"}')
    env = dict(os.environ, HOME=str(home), XDG_CONFIG_HOME=str(config))
    tool = [str(ROOT / "Tools" / "install-browser")]
    r = subprocess.run(tool + ["--user", "--bin", TOKENBRIDGE], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    host_program = home / ".local" / "libexec" / "tokenbridge" / "browser-host"
    for d in (config / "chromium" / "NativeMessagingHosts", home / ".mozilla" / "native-messaging-hosts"):
        assert json.loads((d / "org.tokenbridge.uaf.json").read_text())["path"] == str(host_program)
    # The installed host program is what a browser starts: it answers the extension, and only it.
    call = frame({"id": 1, "method": "discover", "origin": "https://a.example"})
    r2 = subprocess.run([str(host_program), CHROMIUM_ORIGIN], input=call, capture_output=True, timeout=60,
                        env=dict(os.environ, DBUS_SESSION_BUS_ADDRESS="unix:path=/nonexistent"))
    assert replies(r2.stdout) == [{"id": 1, "errorCode": 255}]
    assert json.loads((config / "tokenbridge" / "config.json").read_text()) == \
        {"pinentry": "pinentry-tty", "serviceOriginCallers": ["unix:exe:" + TOKENBRIDGE_REAL]}
    r = subprocess.run(tool + ["--user", "--uninstall"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and not host_program.exists(), r.stderr
    assert not (home / ".mozilla" / "native-messaging-hosts" / "org.tokenbridge.uaf.json").exists()
    # System-wide, as Tools/install-udev does it.
    prefix = tmp_path / "root"
    r = subprocess.run([str(ROOT / "Tools" / "install-udev"), "--prefix", str(prefix), "--bin", TOKENBRIDGE],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for f in ("etc/chromium/native-messaging-hosts", "usr/lib/mozilla/native-messaging-hosts"):
        manifest = json.loads((prefix / f / "org.tokenbridge.uaf.json").read_text())
        assert manifest["path"] == "/usr/local/libexec/tokenbridge/browser-host"
    assert f"'{TOKENBRIDGE_REAL}' browser-host" in (prefix / "usr/local/libexec/tokenbridge/browser-host").read_text()
