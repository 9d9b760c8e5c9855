"""The desktop service (docs/dbus-api.md) under many callers, cancellations and hostile callers: listings and policy
checks answer while another caller's operation holds a token; a flood of calls from one caller is bounded (Busy)
and leaves the others, and pcscd, served; a caller whose root holds a FIFO at /.flatpak-info does not stop the bus
thread; idle exit answers every call already sent. Same private bus and clients as test_dbus_service.py."""
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import TOKENBRIDGE, wait_until
from test_dbus_service import (MY_FACET, NAME, PATH, REQUEST_IFACE, SERVICE, bus, call, has_owner, home,  # noqa: F401
                               pinentry_log, process, response, scenario, unwrap)
from test_uaf import rp as rps  # noqa: F401

from jeepney import DBusAddress, HeaderFields, MessageType, new_method_call  # noqa: E402
from jeepney.wrappers import DBusErrorResponse  # noqa: E402


def requests_seen(d):
    p = d / "count"
    return int(p.read_text()) if p.exists() else 0


def service_sockets(pid):
    """The service's sockets: its bus connection and one per PC/SC context it holds."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                n += 1
        except OSError:
            pass
    return n


def threads(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(l for l in f if l.startswith("Threads:")).split()[1])


def test_check_policy_answers_while_another_callers_pin_dialog_is_up(cards, bus, rps, scenario, tmp_path):
    counter = tmp_path / "requests"
    counter.mkdir()
    cards(args=("--pause-dir", str(counter)))
    server = rps("--facet", MY_FACET)
    b = bus()
    scenario(["@hang"])
    a = b.connect()
    path = process(a, server.request("Reg", username="alice")["uafRequest"])
    wait_until(lambda: "GETPIN" in pinentry_log(tmp_path), "A's PIN dialog")
    before = requests_seen(counter)
    c = b.connect()
    # Another caller's CheckPolicy answers from the tokens the running registration found, without the card.
    reg = server.request("Reg", username="bob")["uafRequest"]
    assert call(c, "CheckPolicy", "sa{sv}", reg, {}, timeout=10) == (0,)
    auth = server.request("Auth")["uafRequest"]
    assert call(c, "CheckPolicy", "sa{sv}", auth, {}, timeout=10) == (5,)  # no registration here yet
    [listed] = unwrap(call(c, "ListTokens", "a{sv}", {}, timeout=10)[0])
    assert not listed["usable"] and listed["reason"].startswith("busy")
    assert len(unwrap(call(c, "Discover", timeout=10)[0])["availableAuthenticators"]) == 1
    assert requests_seen(counter) == before
    a.send_and_get_reply(new_method_call(DBusAddress(path, bus_name=NAME, interface=REQUEST_IFACE), "Close"))
    code, results, _ = response(a, path, timeout=30)
    assert code == 1 and results["errorCode"] == 3, results
