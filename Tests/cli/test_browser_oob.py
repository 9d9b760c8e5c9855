"""Out-of-band from a web page, for browsers without the extension: the page offers the Nevis-style link
`tokenbridge://x-callback-url/…?dispatchTokenResponse=…` for a token the reference RP (Tools/rp) created, and polls
the RP's status until the operation is done. Headless Chromium and Firefox ESR (no extension) click it. Chromium
launches an external scheme without asking only for origins it is told to (the `AutoLaunchProtocolsFromOrigins`
policy, or the per-profile grant the dialog's "always allow" stores, `protocol_handler.allowed_origin_protocol_pairs`;
the test uses the profile grant: a policy file is system-wide) and hands the link to xdg-open. Firefox does when the
scheme's handler is "use the system default" without asking (the profile's handlers.json, what its dialog's
"always" stores) and the per-site prompt is off, and hands the link to GIO. Both then run the handler
`tokenbridge install-desktop` registered (`Exec=tokenbridge oob %u`, `Terminal=true`), found through xdg-mime's
mimeapps.list. The terminal emulator is a stand-in that runs the handler without a terminal, so tokenbridge confirms
and asks the PIN through the scripted pinentry; everything else is the real path (the browser, xdg-open or GIO, the
desktop entry, tokenbridge, the virtual card, the RP)."""
import base64
import json
import os
import ssl
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

import browsers
from conftest import TOKENBRIDGE, tb, wait_until
from relying_party import RelyingParty
from test_browser import self_signed
from test_dbus_service import home, pinentry_log, scenario  # noqa: F401 (fixtures)

OP_NAMES = {"Reg": "registration", "Auth": "authentication"}
# The terminals GLib 2.74 looks for before xterm, in its order (gio/gdesktopappinfo.c, prepend_terminal_to_vector;
# the same names are in Debian 12's libgio-2.0.so.0). The stand-in answers to every name, so a real one installed on
# the machine is never started.
GIO_TERMINALS = ["gnome-terminal", "mate-terminal", "xfce4-terminal", "tilix", "konsole", "nxterm", "color-xterm",
                 "rxvt", "dtterm"]

PAGE = """<!doctype html><meta charset="utf-8"><title>Sign in</title>
<p><a id="oob" href="{link}">Sign in with TokenBridge</a></p><p id="state">waiting</p>
<script>
(async function poll() {{
  const s = await (await fetch("/status?session={session}")).json();
  const state = document.getElementById("state");
  if (s.status === "succeeded") state.textContent = "{done} " + s.userId;
  else {{ state.textContent = s.status; setTimeout(poll, 300); }}
}})();
</script>
"""


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


class Site:
    """The relying party's web page on https://127.0.0.1:P. `/oob?op=Reg|Auth&user=U` has the RP create an
    out-of-band token and shows its link (with `redeem` or `callbacks` a hostile page's variants of it);
    `/status?session=S` is the RP's status for the page's polling (the RP speaks plain http)."""

    def __init__(self, tmp_path, rp):
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                url = urlparse(self.path)
                q = {k: v[0] for k, v in parse_qs(url.query).items()}
                if url.path == "/status":
                    body = json.dumps(rp.post("/nevisfido/status", {"sessionId": q["session"]}, uaf=False))
                    return self.answer(body.encode(), "application/json")
                self.answer(site.page(q).encode(), "text/html; charset=utf-8")

            def answer(self, data, ctype):
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self_signed(tmp_path))
        self.rp = rp
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.origin = f"https://127.0.0.1:{self.server.server_address[1]}"

    def page(self, q):
        op = q["op"]
        t = self.rp.post(f"/nevisfido/token/create/{OP_NAMES[op]}",
                         {"op": op, "context": json.dumps({"username": q["user"]})})
        data = {"token": t["token"], "redeem_url": q.get("redeem", t["redeem_url"]), "data": "Sign in to the bank"}
        payload = {"nma_data": data, "nma_data_content_type": "application/json", "nma_data_version": "1"}
        link = f"tokenbridge://x-callback-url/{OP_NAMES[op]}?dispatchTokenResponse={b64u(json.dumps(payload).encode())}"
        link += q.get("callbacks", "")
        done = "Registered" if op == "Reg" else "Signed in as"
        return PAGE.format(link=link.replace("&", "&amp;"), session=t["sessionId"], done=done)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class Desktop:
    """What a desktop session gives the browser: tokenbridge's scheme handler installed by `install-desktop`,
    xdg-open (logged; only tokenbridge: links are passed on, nothing else is opened), a graphical session's
    DISPLAY (xdg-open offers scheme handlers only there) and the terminal emulator stand-in (xdg-open runs
    $TERMINAL, GIO the first of its known terminals on PATH: each of their names is the stand-in here)."""

    def __init__(self, tmp_path, home):  # noqa: F811 (the fixture's value)
        self.dir = tmp_path / "desktop"
        (self.dir / "bin").mkdir(parents=True)
        self.opened, self.status, self.err = (self.dir / n for n in ("opened", "handler.status", "handler.err"))
        xdg_open = self.dir / "bin" / "xdg-open"
        xdg_open.write_text(f"""#!/bin/sh
printf '%s\\n' "$1" >> '{self.opened}'
case "$1" in tokenbridge:*) DISPLAY=:tokenbridge-test exec /usr/bin/xdg-open "$@" ;; esac
""")
        term = self.dir / "bin" / "xterm"
        term.write_text(f"""#!/bin/sh
# TERMINAL -e PROGRAM ARGS...: runs it without a terminal, keeps its stderr and exit status
case "$1" in -e | -x | --) shift ;; esac
"$@" </dev/null >/dev/null 2>>'{self.err}'
echo $? >> '{self.status}'
""")
        for f in (xdg_open, term):
            f.chmod(0o755)
        for name in GIO_TERMINALS:
            (self.dir / "bin" / name).symlink_to(term)
        self.env = dict(home, PATH=f"{self.dir / 'bin'}:{os.environ['PATH']}", TERMINAL=str(term))
        r = tb("install-desktop", env=home)
        assert r.returncode == 0, r.stderr

    def runs(self):
        return self.status.read_text().split() if self.status.exists() else []


@pytest.fixture
def site(tmp_path):
    rp = RelyingParty(tmp_path)
    s = Site(tmp_path, rp)
    yield s
    s.stop()
    rp.stop()


@pytest.fixture(params=["chromium", "firefox"])
def browser(request, tmp_path, home, site):  # noqa: F811
    """The browser without the extension, allowed to open tokenbridge: links from the page."""
    missing = browsers.available(request.param)
    if missing:
        pytest.skip(missing)
    desktop = Desktop(tmp_path, home)
    host = browsers.host_wrapper(tmp_path, TOKENBRIDGE)  # the profile gets its manifest; nothing uses it here
    if request.param == "chromium":
        prefs = {"protocol_handler": {"allowed_origin_protocol_pairs": {site.origin: {"tokenbridge": True}}}}
        b = browsers.Chromium(tmp_path, host, desktop.env, extension=False, prefs=prefs)
    else:
        prefs = {"security.external_protocol_requires_permission": False,
                 "network.protocol-handler.external.tokenbridge": True,
                 "network.protocol-handler.warn-external.tokenbridge": False}
        handlers = {"defaultHandlersVersion": {}, "mimeTypes": {},
                    "schemes": {"tokenbridge": {"action": 4, "ask": False}}}  # 4: the system's default handler
        b = browsers.Firefox(tmp_path, host, desktop.env, extension=False, prefs=prefs, handlers=handlers)
    b.desktop = desktop
    yield b
    b.quit()


def click_link(b, url):
    b.open(url)
    b.click("oob")


def opened_besides_links(b):
    """What xdg-open was asked to open other than tokenbridge: links (Chromium's clicks go through it)."""
    opened = b.desktop.opened.read_text().splitlines() if b.desktop.opened.exists() else []
    return [u for u in opened if not u.startswith("tokenbridge://x-callback-url/")]


def state(b):
    return b.run("return document.getElementById('state').textContent")


def test_the_page_link_signs_in(card, browser, site, scenario, tmp_path):  # noqa: F811
    """Registration, then a login, each from the page's link: the handler confirms and asks the PIN, and the page
    sees the operation complete."""
    scenario(["@ok", "123456"])
    click_link(browser, site.origin + "/oob?op=Reg&user=alice")
    wait_until(lambda: state(browser) == "Registered alice", "the page's registration", timeout=90)
    # The page sees the server's answer before the handler has ended: its exit status comes after.
    wait_until(lambda: len(browser.desktop.runs()) == 1, "the handler's end", timeout=60)
    assert browser.desktop.runs() == ["0"], browser.desktop.err.read_text()
    log = pinentry_log(tmp_path)
    assert "CONFIRM" in log and "GETPIN" in log, log
    assert [r["username"] for r in site.rp.registrations()] == ["alice"]

    scenario(["@ok", "123456"])
    click_link(browser, site.origin + "/oob?op=Auth&user=alice")
    wait_until(lambda: state(browser) == "Signed in as alice", "the page's login", timeout=90)
    wait_until(lambda: len(browser.desktop.runs()) == 2, "the handler's end", timeout=60)
    assert browser.desktop.runs() == ["0", "0"], browser.desktop.err.read_text()
    assert opened_besides_links(browser) == []


def test_a_hostile_link_is_refused(card, browser, site, scenario, tmp_path):  # noqa: F811
    """A page's link whose redeem URL is plain http on a non-loopback host is refused before any dialog (exit 31);
    one whose callbacks are a `javascript:` and a `file:` URL runs the operation the user confirmed, and neither
    callback is opened."""
    click_link(browser, site.origin + "/oob?op=Reg&user=mallory&redeem="
               "http%3A%2F%2F198.51.100.7%2Fnevisfido%2Ftoken%2Fredeem%2Fregistration")
    wait_until(lambda: browser.desktop.runs(), "the handler's refusal", timeout=60)
    assert browser.desktop.runs() == ["31"]
    assert "not https" in browser.desktop.err.read_text()
    assert pinentry_log(tmp_path) == "" and site.rp.registrations() == []

    scenario(["@ok", "123456"])
    callbacks = "%26x-success%3Djavascript%3Aalert(document.cookie)%26x-error%3Dfile%3A%2F%2F%2Fetc%2Fpasswd"
    click_link(browser, site.origin + "/oob?op=Reg&user=alice&callbacks=" + callbacks)
    wait_until(lambda: state(browser) == "Registered alice", "the page's registration", timeout=90)
    wait_until(lambda: len(browser.desktop.runs()) == 2, "the handler's end", timeout=60)
    err = browser.desktop.err.read_text()
    assert browser.desktop.runs() == ["31", "0"], err
    assert "Not opened: javascript:alert(document.cookie)" in err, err
    assert opened_besides_links(browser) == []
