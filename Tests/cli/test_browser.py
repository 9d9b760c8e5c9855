"""Web pages reach the token: navigator.fido.uaf (FIDO UAF DOM API) in headless Chromium and Firefox ESR with the
extension (browser/extension), its native-messaging host (`tokenbridge browser-host`) and `tokenbridge serve` on a
private bus (test_dbus_service's fixture). The page is served over HTTPS on loopback with a certificate made here
(the browsers are told to accept it); the relying party is Tools/rp, trusting the page's origin. PINs come from the
scripted pinentry. The host binary without a browser: test_browser_host.py."""
import datetime
import ipaddress
import json
import os
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

import browsers
from conftest import TOKENBRIDGE, dbus_exec, wait_until
from implementations import UAFToken
from dbus_service import call, unwrap
from test_dbus_service import alive, bus, home, pinentry_log, pinentry_pids, scenario  # noqa: F401 (fixtures)
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
    https://localhost:P (another origin, not trusted), on https://127.0.0.1:R (a second origin) and on
    http://127.0.0.1:Q (not secure)."""

    def __init__(self, tmp_path):
        self.servers = []
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self_signed(tmp_path))
        tls = self.serve(ctx)
        plain = self.serve(None)
        self.origin = f"https://127.0.0.1:{tls}"
        self.second_origin = f"https://127.0.0.1:{self.serve(ctx)}"
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
    """The configuration that lets the host act for web origins (docs/web-pages.md)."""
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
        f"[D-BUS Service]\nName=org.tokenbridge.TokenBridge1\nExec={dbus_exec(TOKENBRIDGE)} serve --idle-timeout 120\n")
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


def test_a_frame_of_another_origin_is_refused(browser, card, bus, rps, pages, tmp_path):
    """A page cannot embed a relying party's page and have it act: a frame whose origin is not its tab's gets
    UNTRUSTED_FACET_ID, even when the server trusts both origins; a frame of the tab's own origin is served."""
    server = rps("--facet", pages.origin, "--facet", pages.second_origin)
    allow_host(tmp_path)
    b = browser({"DBUS_SESSION_BUS_ADDRESS": bus().address})
    reg = server.request("Reg", username="alice")["uafRequest"]
    page(b, pages.second_origin)
    assert b.run_async(CALL, "checkPolicy", reg, None) == {"error": 0}
    page(b, pages.origin)
    for src, want in ((pages.second_origin, 7), (pages.origin, 0)):
        b.run("document.body.innerHTML = ''; const f = document.createElement('iframe');"
              "f.src = arguments[0]; document.body.appendChild(f)", src + "/uaf.html")
        b.frame(0)
        wait_until(lambda: b.run("return !!(window.tb && navigator.fido)"), "the frame's API", timeout=30)
        assert b.run("return location.origin") == src
        assert b.run_async(CALL, "checkPolicy", reg, None) == {"error": want}, src
        b.frame(None)


def test_leaving_the_page_closes_its_dialog(browser, card, bus, rps, pages, scenario, tmp_path):
    """A registration's page navigated away while its PIN dialog is up: the request is closed (the pinentry
    stopped), nothing is registered, and the token is free for the next page."""
    server = rps("--facet", pages.origin)
    allow_host(tmp_path)
    session = bus()
    b = browser({"DBUS_SESSION_BUS_ADDRESS": session.address})
    page(b, pages.origin)
    scenario(["@hang", "123456"])
    b.run("window.tb.start('reg', 'processUAFOperation', arguments[0])",
          server.request("Reg", username="alice")["uafRequest"])
    wait_until(lambda: "GETPIN" in pinentry_log(tmp_path), "the PIN dialog", timeout=60)
    [pid] = pinentry_pids(tmp_path)
    page(b, pages.second_origin)
    wait_until(lambda: not alive(pid), "the pinentry stopped once its page was gone", timeout=30)
    assert server.registrations() == []
    # The operation ends at its next step once its dialog is gone; until then a call for the token is answered Busy
    # (docs/dbus-api.md: no queue, the caller tries again). Seen: Busy right after the pinentry died, on a loaded
    # machine. The next page's call is made once ListTokens no longer names the token busy.
    c = session.connect()
    try:
        wait_until(lambda: all(not str(t.get("reason", "")).startswith("busy")
                               for t in unwrap(call(c, "ListTokens", "a{sv}", {})[0])),
                   "the service done with the token", timeout=30)
    finally:
        c.close()
    page(b, pages.origin)
    r = b.run_async(CALL, "processUAFOperation", server.request("Reg", username="bob")["uafRequest"], None)
    assert "ok" in r, r
