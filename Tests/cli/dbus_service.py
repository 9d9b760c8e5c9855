"""The desktop service's test harness (docs/dbus-api.md): a private dbus-daemon per test with `tokenbridge serve` on it,
jeepney calls and signals, the scripted pinentry's scenario and log. Used by test_dbus_service.py and the other
service, browser and conformance tests."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT, TOKENBRIDGE, VIRTUAL_TOKEN, wait_until
from implementations import UAFToken
from test_uaf import rp as rps  # noqa: F401 (fixture: the relying parties a test starts)
from uaf_shapes import PIV_AUTHENTICATOR, check_discovery_data

jeepney = pytest.importorskip("jeepney", reason="jeepney (PyPI) is the D-Bus client of these tests: Tools/setup")
from jeepney import DBusAddress, MatchRule, message_bus, new_method_call  # noqa: E402
from jeepney.io.blocking import open_dbus_connection  # noqa: E402
from jeepney.wrappers import DBusErrorResponse  # noqa: E402

SCRIPTED = str(ROOT / "Tests" / "cli" / "scripted_pinentry.py")
NAME = "org.tokenbridge.TokenBridge1"
PATH = "/org/tokenbridge/TokenBridge1"
SERVICE = DBusAddress(PATH, bus_name=NAME, interface=NAME)
REQUEST_IFACE = NAME + ".Request"
# This process's facet ID, as the service derives it (docs/dbus-api.md: unix:exe:<executable>).
MY_FACET = "unix:exe:" + os.readlink("/proc/self/exe")

pytestmark = pytest.mark.skipif(shutil.which("dbus-daemon") is None, reason="dbus-daemon (Debian dbus-daemon) missing")


class Bus:
    """A private dbus-daemon (session type) with its own service directory, and the service on it."""

    def __init__(self, tmp_path, env):
        self.tmp = tmp_path
        self.env = env
        self.services = tmp_path / "services"
        self.services.mkdir(exist_ok=True)
        conf = tmp_path / "bus.conf"
        conf.write_text(textwrap.dedent(f"""\
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>session</type>
              <listen>unix:dir={tmp_path}</listen>
              <servicedir>{self.services}</servicedir>
              <auth>EXTERNAL</auth>
              <policy context="default">
                <allow send_destination="*" eavesdrop="true"/>
                <allow eavesdrop="true"/>
                <allow own="*"/>
              </policy>
            </busconfig>
            """))
        self.daemon = subprocess.Popen(["dbus-daemon", f"--config-file={conf}", "--print-address", "--nofork"],
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                       env=dict(os.environ, **env))
        self.address = self.daemon.stdout.readline().strip()
        assert self.address.startswith("unix:"), self.address
        self.service = None
        self.log = tmp_path / "serve.log"

    def start(self, idle=60):
        self.service = subprocess.Popen([TOKENBRIDGE, "serve", "--address", self.address, "--idle-timeout", str(idle)],
                                        env=dict(os.environ, **self.env), stderr=open(self.log, "a"),
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        c = self.connect()
        wait_until(lambda: has_owner(c, NAME), "the service on the bus")
        c.close()

    def connect(self):
        return open_dbus_connection(bus=self.address)

    def stop(self):
        if self.service and self.service.poll() is None:
            self.service.terminate()
            self.service.wait(timeout=10)
        self.daemon.terminate()
        self.daemon.wait(timeout=10)


def has_owner(conn, name):
    return conn.send_and_get_reply(message_bus.NameHasOwner(name)).body[0]


def call(conn, method, sig="", *args, timeout=30):
    r = conn.send_and_get_reply(new_method_call(SERVICE, method, sig, args), timeout=timeout)
    if r.header.message_type.name == "error":
        raise DBusErrorResponse(r)
    return r.body


def unwrap(v):
    """jeepney's variants are (signature, value); dictionaries of them become plain values."""
    if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str):
        return unwrap(v[1])
    if isinstance(v, dict):
        return {k: unwrap(x) for k, x in v.items()}
    if isinstance(v, list):
        return [unwrap(x) for x in v]
    return v


def process(conn, message, options=None, channel_bindings=""):
    """ProcessUAFOperation with the match rule added first (docs/dbus-api.md); returns the request path."""
    rule = MatchRule(type="signal", interface=REQUEST_IFACE, member="Response")
    conn.send_and_get_reply(message_bus.AddMatch(rule))
    return call(conn, "ProcessUAFOperation", "sssa{sv}", "", message, channel_bindings, options or {})[0]


def response(conn, path, timeout=60):
    rule = MatchRule(type="signal", interface=REQUEST_IFACE, member="Response", path=path)
    with conn.filter(rule) as q:
        msg = conn.recv_until_filtered(q, timeout=timeout)
    code, results = msg.body
    return code, unwrap(results), msg


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "pinentry.json"

    def write(answers):
        path.write_text(json.dumps({"answers": answers}))
        for suffix in (".pos", ".log"):
            p = tmp_path / ("pinentry.json" + suffix)
            if p.exists():
                p.unlink()
        return path

    write([])
    return write


@pytest.fixture
def home(tmp_path):
    (tmp_path / "config" / "tokenbridge").mkdir(parents=True)
    return {"XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "PINENTRY_PROGRAM": SCRIPTED, "SCRIPTED_PINENTRY_SCENARIO": str(tmp_path / "pinentry.json")}


@pytest.fixture
def bus(tmp_path, home, scenario):
    started = []

    def make(extra_env=None, start=True, idle=60):
        b = Bus(tmp_path, dict(home, **(extra_env or {})))
        started.append(b)
        if start:
            b.start(idle=idle)
        return b

    yield make
    for b in started:
        b.stop()


def pinentry_log(tmp_path):
    p = tmp_path / "pinentry.json.log"
    return p.read_text() if p.exists() else ""


def pinentry_pids(tmp_path):
    p = tmp_path / "pinentry.json.pids"
    return [int(x) for x in p.read_text().split()] if p.exists() else []


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purpose.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"
