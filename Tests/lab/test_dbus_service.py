"""tokenbridge serve (docs/dbus-api.md) on a real session bus, in a guest booted with systemd (Tools/lab --systemd:
root's user manager and its dbus-daemon), end to end. The activation files are installed from the checkout
(Tools/install-udev); the service is started by D-Bus activation through its user unit; a virtual composite token (PIV +
FIDO2 on one USB device) is attached over USB/IP; the reference RP runs on loopback; PINs come from a scripted pinentry
named in the configuration. busctl, gdbus and a jeepney client discover, check a policy (no prompt), register,
authenticate with a transaction and deregister on the PIV and the FIDO2 side, each answer accepted by the RP; two
clients at once on one token (Busy, as documented); Close() and a client killed with SIGKILL cancel (the dialog's
program ends); a caller claiming a Flatpak app id gets no facet of that app; the service exits when idle. One boot for
all of it: Tests/lab/guest_dbus_service.sh and .py run inside."""
import json
import os

import pytest

from conftest import BIN, _lab_unavailable, _usbip_unavailable, systemd_run

PIV, FIDO2 = "piv-20000001", "fido2-hidraw0"


@pytest.fixture(scope="module")
def lab():
    reason = _lab_unavailable() or _usbip_unavailable()
    if reason:
        pytest.skip(reason)
    r = systemd_run("guest_dbus_service.sh", timeout=1800)
    out = dict(l.split("=", 1) for l in r.stdout.splitlines() if "=" in l and l.split("=", 1)[0].isidentifier())
    assert r.returncode == 0 and out.get("done") == "1" and out.get("client_rc") == "0", \
        r.stdout[-6000:] + r.stderr[-2000:]
    t = json.loads(out["timing"])
    print("\nlatency in the lab guest (ms; method call → pinentry's first command | PIN sent → Response; the CLI: "
          "process start → first command | PIN sent → exit):")
    for k in ("piv", "fido2"):
        for op in ("reg", "auth"):
            s, c = t[f"svc_{k}_{op}"], t[f"cli_{k}_{op}"]
            print(f"  {k} {op}: service {s['call_to_first']} | {s['pin_to_response']}   "
                  f"uaf process {c.get('call_to_first')} | {c.get('pin_to_response')}   "
                  f"(service - CLI: {s['call_to_first'] - c.get('call_to_first', 0):+d} | "
                  f"{s['pin_to_response'] - c.get('pin_to_response', 0):+d})")
    return out


def j(out, key):
    return json.loads(out[key])


def test_activation_files_from_install_udev(lab):
    # docs/dbus-api.md: Tools/install-udev installs the D-Bus activation file and the user unit, naming this binary.
    assert "/usr/local/share/dbus-1/services/org.tokenbridge.TokenBridge1.service" in lab["install_log"]
    assert "/etc/systemd/user/tokenbridge-serve.service" in lab["install_log"]


def test_started_by_activation(lab):
    # Whatever installed them, the files name this build's binary and the bus lists the name as activatable.
    tb = os.path.realpath(BIN / "tokenbridge")
    assert f'Exec="{tb}" serve' in lab["dbus_file"] and "SystemdService=tokenbridge-serve.service" in lab["dbus_file"]
    assert "Type=dbus" in lab["unit_file"] and "BusName=org.tokenbridge.TokenBridge1" in lab["unit_file"]
    assert f'ExecStart="{tb}" serve' in lab["unit_file"]
    assert lab["activatable"] == "1"
    # Not running until the first call; that call (busctl's Discover) started the user unit.
    assert lab["before_owner"] == "no" and lab["before_active"] == "inactive" == lab["before_call_active"]
    assert lab["busctl_discover_rc"] == "0"
    assert lab["after_call_active"] == "active"
    assert "UserUnit=tokenbridge-serve.service" in lab["busctl_status"] and f"Exe={tb}" in lab["busctl_status"]
    assert f"PID={lab['main_pid']} " in lab["busctl_status"]


def test_discover_with_busctl_and_jeepney(lab):
    assert lab["busctl_discover_err"] == ""
    d = json.loads(lab["busctl_discover"])["data"][0]
    assert d["supportedUAFVersions"]["data"] == [[1, 0], [1, 1]]
    assert d["clientVendor"]["data"] == "TokenBridge" and d["clientVersion"]["data"]
    py = j(lab, "py_discover")
    assert py["versions"] == [[1, 0], [1, 1]] and py["vendor"] == "TokenBridge"
    assert sorted(a["aaid"]["data"] for a in d["availableAuthenticators"]["data"]) == py["aaids"]
    assert py["aaids"] == ["7B1D#0001", "7B1D#0002"]


def test_discover_lists_both_sides_of_a_composite_token(lab):
    # One USB device that is a PIV card and a FIDO2 key is two UAF authenticators (7B1D#0001 through PIV, 7B1D#0002
    # through FIDO2): both register below. Each listed authenticator's kind and AAID fit its token id.
    auths = j(lab, "py_discover")["auths"]
    assert sorted(a[2] for a in auths) == ["7B1D#0001", "7B1D#0002"], auths
    for token, kind, aaid, usable in auths:
        assert token.startswith(kind + "-") and usable, auths
        assert aaid == {"piv": "7B1D#0001", "fido2": "7B1D#0002"}[kind], auths


def test_check_policy_never_prompts(lab):
    assert lab["py_check_reg"] == "0" and lab["py_check_reg_fido2"] == "0"
    assert lab["py_check_auth_unregistered"] == "5"  # nothing registered yet
    assert lab["py_check_untrusted"] == "7"  # the RP that trusts only the Flatpak app
    assert lab["busctl_check_reg"] == "u 0"  # busctl is among the RP's facets
    assert lab["gdbus_check_reg"] == "(uint32 7,)"  # gdbus is not: its own executable is its facet
    assert lab["check_pinentry_runs"] == "0"


@pytest.mark.parametrize("kind,user,aaid", [("piv", "alice", "7B1D#0001"), ("fido2", "bob", "7B1D#0002")])
def test_register_authenticate_deregister(lab, kind, user, aaid):
    token = PIV if kind == "piv" else FIDO2
    reg = j(lab, f"{kind}_reg")
    assert reg["code"] == 0 and reg["errorCode"] == 0, reg
    assert reg["unicast"]  # Response's destination is the caller
    assert lab[f"{kind}_reg_status"] == "1200"
    assert j(lab, f"{kind}_reg_added") == [[user, aaid]]
    # The dialog names the app (the caller's facet, from the bus) and the server.
    assert lab[f"{kind}_reg_desc_app"] == "true" and lab[f"{kind}_reg_desc_server"] == "true"
    auth = j(lab, f"{kind}_auth")
    assert auth["code"] == 0 and auth["errorCode"] == 0, auth
    assert lab[f"{kind}_auth_status"] == "1200"
    [desc] = j(lab, f"{kind}_auth_tx_shown")
    assert desc.startswith("SETDESC ") and f"({token})" in desc
    assert f"%0AConfirm: Pay 10 CHF to Bob ({kind})%0A" in desc
    dereg = j(lab, f"{kind}_dereg")
    assert dereg["code"] == 0 and json.loads(dereg["message"]) == {"uafProtocolMessage": ""}
    assert dereg["pinentry_runs"] == 0
    assert lab[f"{kind}_dereg_regs"] == "true"  # the RP's list is back to what it was
    assert j(lab, f"{kind}_dereg_local") == {"before": [[token, user]], "after": []}


def test_responses_are_unicast(lab):
    assert j(lab, "watcher_saw") == []


def test_two_clients_on_one_token(lab):
    # docs/dbus-api.md, Concurrency: one operation per token; a second caller is refused with Busy (no queue),
    # with the token named or not; Discover answers meanwhile and says the token is busy.
    assert lab["a_request"].startswith("/org/tokenbridge/TokenBridge1/request/") and lab["a_dialog"] == "true"
    busy = j(lab, "busy")
    assert busy["same_token"] == f"org.tokenbridge.TokenBridge1.Error.Busy 15: an operation is running on {PIV}"
    assert busy["any_token"].startswith("org.tokenbridge.TokenBridge1.Error.Busy 15: ")
    usable, reason = j(lab, "busy_discover")[PIV]
    assert not usable and reason.startswith("busy")
    assert lab["close_by_other"] == "org.tokenbridge.TokenBridge1.Error.AccessDenied"


def test_killed_client_cancels(lab):
    assert lab["killed_dialog_gone"] == "true"
    assert j(lab, "after_kill_reg") == {"code": 0, "errorCode": 0, "error": None}
    assert lab["after_kill_status"] == "1200"


def test_close_cancels(lab):
    assert lab["close_dialog"] == "true" and lab["close_reply"] == "method_return"
    r = j(lab, "close_response")
    assert r["code"] == 1 and r["errorCode"] == 3, r
    assert lab["close_dialog_gone"] == "true"
    # Over 2 s with the dialog up (the lower of two such windows): the service waits, it does not spin.
    assert int(lab["waiting_cpu_ms"]) <= 200, lab["waiting_cpu_windows"]
    assert lab["close_again"] == "org.tokenbridge.TokenBridge1.Error.NotFound"
    assert j(lab, "close_regs") == []


def test_a_pretended_flatpak_app_gets_no_facet_of_it(lab):
    # Options claiming the app id, FLATPAK_ID in the environment, a /.flatpak-info in the caller's root (which is
    # the service's root too): the facet stays unix:exe:<python>, which the app's RP does not trust.
    assert lab["pretend_check_claims"] == "7"
    assert lab["pretend_check_claims_own_rp"] == "0"  # the RP trusting the executable still does
    p = j(lab, "pretend_process")
    assert p["code"] == 2 and p["errorCode"] == 7, p
    assert f"facet ID {lab['my_facet']};" in p["error"]
    assert lab["pretend_child"] == "env org.example.App 7\\ninfo 7"
    assert lab["pretend_pinentry_runs"] == "0"
    assert j(lab, "pretend_flat_regs") == []


def test_idle_exit(lab):
    # A drop-in gives the unit --idle-timeout 10: after a call it exits by itself, successfully, and the name goes.
    assert lab["idle_stopped"] == "inactive"
    assert lab["idle_call_rc"].startswith("0 aa{sv}")
    assert lab["idle_active"] == "active" and "serve --idle-timeout 10" in lab["idle_cmdline"]
    assert lab["idle_after"] == "inactive" and lab["idle_owner"] == "no"
    assert lab["idle_result"] == "success 0"
    assert 9.5 <= float(lab["idle_exit_s"]) <= 40


def test_latency_figures_measured(lab):
    # Printed by the fixture (under TCG they are seconds and noisy: compared, not judged, here).
    t = j(lab, "timing")
    for k in ("piv", "fido2"):
        for op in ("reg", "auth"):
            for side in ("svc", "cli"):
                f = t[f"{side}_{k}_{op}"]
                assert f.get("call_to_first", 0) > 0 and f.get("pin_to_response", 0) > 0, (side, k, op, f)
            assert t[f"cli_{k}_{op}"]["status"] == 1200
