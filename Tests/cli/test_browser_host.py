"""The native-messaging host binary (`tokenbridge browser-host`) without a browser: who may start it, the frames it
must survive (truncated, oversized, not JSON, EOF), calls it answers by their id, and its installation
(Tools/install-browser, Tools/install-udev). The browsers themselves: test_browser.py."""
import json
import os
import struct
import subprocess

import pytest

import browsers
from conftest import ROOT, TOKENBRIDGE
from test_browser import CHROMIUM_ORIGIN, GECKO_ID, TOKENBRIDGE_REAL, allow_host
from test_dbus_service import bus, home, scenario  # noqa: F401 (fixtures)


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
