"""The plug-in path for real, in a guest booted with systemd (Tools/lab --systemd: udevd, logind, root's user
manager): attaching a composite token enrolls it with no command typed (udev → SYSTEMD_USER_WANTS →
tokenbridge-enroll@.service → tokenbridge enroll, PINs from a scripted pinentry); a replug asks nothing; a second
token enrolls separately; a token pulled while its enrollment waits leaves nothing written and the next insert
completes it; onInsert ask asks through pinentry, remembers "declined", and --reset forgets; without configuration
enroll does nothing, and `prefer: piv` enrolls the CCID side. One --systemd guest for all of it (the other lab tests
share a plain guest; Tools/test shares one --systemd guest among the modules that need one, LAB_SYSTEMD_GUEST).
Tests/lab/guest_enroll_systemd.sh drives it inside the guest."""
import json

import pytest

from conftest import _lab_unavailable, _usbip_unavailable, systemd_run

A = "usb-1209-0001-20000001"
B = "usb-1209-0001-30000001"


@pytest.fixture(scope="module")
def plug():
    reason = _lab_unavailable() or _usbip_unavailable()
    if reason:
        pytest.skip(reason)
    r = systemd_run("guest_enroll_systemd.sh", timeout=1800)
    out = dict(l.split("=", 1) for l in r.stdout.splitlines() if "=" in l and l.split("=", 1)[0].isidentifier())
    assert r.returncode == 0 and out.get("done") == "1", r.stdout[-4000:] + r.stderr[-2000:]
    print(f"\ninsert→enrolled in the lab (excl. typing: the scripted pinentry answers at once): "
          f"{out['insert_to_enrolled']} s")
    return out


def test_plugging_in_enrolls_once(plug):
    # Exactly one enrollment of token A (its FIDO2 side: prefer's default), although two units ran (hidraw and
    # CCID interface): a first PIN and the registration's PIN, both from pinentry.
    assert json.loads(plug["a_regs"]) == ["7B1D#0002"]
    assert plug["a_enrolled"] == "1" and plug["a_failed"] == "0", plug
    assert plug["a_enrolled_line"].startswith(f"Enrolled fido2-hidraw0 ({A}) for root at http://127.0.0.1:")
    assert plug["a_getpins"] == "2"
    assert json.loads(plug["a_memory"]) == {A: "enrolled"}
    assert plug["a_rows"].split() == ["fido2-hidraw0:registered"]
    # One physical token: both sides on one USB device, naming each other.
    [token] = json.loads(plug["a_tokens"])  # one token with both capabilities
    assert token["usbDevice"] == A and token.get("kinds") == ["piv", "fido2"], (
        token, plug["a_readers"], plug["pcscd_log"])
    assert token["ids"] == ["piv-20000001", "fido2-hidraw0"]
    assert plug["sigterm"] == "0"
    assert float(plug["insert_to_enrolled"]) > 0


def test_replug_asks_nothing(plug):
    assert int(plug["replug_remembered"]) >= 1
    assert plug["replug_getpins"] == plug["a_getpins"]  # no new GETPIN
    assert json.loads(plug["replug_regs"]) == ["7B1D#0002"]


def test_token_pulled_in_pinentry_leaves_nothing_then_completes(plug):
    assert plug["b_held"] == "yes"
    # The pull ended that run with an error (the token is gone) and nothing of it was kept: no registration at
    # the server, no local row, no memory.
    assert plug["b_pulled_error"] == (
        "tokenbridge: The token was removed from /dev/hidraw1 during the operation; it may not have completed. "
        "Insert it and check with tokenbridge pin status.")
    assert plug["b_pulled_status"] == "10"  # the token went away
    assert plug["b_pulled_failed"] == "1"
    assert json.loads(plug["b_pulled_regs"]) == ["7B1D#0002"]
    assert json.loads(plug["b_pulled_memory"]) == {A: "enrolled"}
    assert plug["b_pulled_rows"].split() == ["fido2-hidraw0:registered"]
    # The next insert completes it: B already has the PIN set before the pull, so only the registration's PIN.
    assert json.loads(plug["b_regs"]) == ["7B1D#0002", "7B1D#0002"]
    assert plug["b_enrolled_line"].startswith(f"Enrolled fido2-hidraw1 ({B}) for root at ")
    assert plug["b_getpins"] == "1"
    assert json.loads(plug["b_memory"]) == {A: "enrolled", B: "enrolled"}
    assert len(plug["b_rows"].split()) == 2 and all(r.endswith(":registered") for r in plug["b_rows"].split())


def test_on_insert_ask_declined_is_remembered_until_reset(plug):
    assert plug["reset"] == f"Forgot {A}: the next plug-in asks again."
    assert plug["ask_confirms"] == "1"
    assert plug["ask_declined"] == "1"
    assert json.loads(plug["ask_memory"]) == {A: "declined", B: "enrolled"}
    assert json.loads(plug["ask_regs"]) == ["7B1D#0002", "7B1D#0002"]
    assert plug["ask_again_confirms"] == "1"  # the replug asked nothing
    assert int(plug["ask_again_remembered"]) >= 1
    assert plug["forget"] == f"Forgot {A}: the next plug-in asks again."
    assert json.loads(plug["forget_memory"]) == {B: "enrolled"}


def test_user_manager_survives_and_no_unit_is_killed(plug):
    # Root's user manager outlived the PAM sessions of `systemctl --user -M root@` (root lingers in the lab);
    # before, logind stopped it 10 s after the last session and the enrolling unit died of SIGTERM.
    assert int(plug["root_sessions_closed"]) >= 1
    assert plug["user_manager_reloaded"] == "1"  # Tools/install-udev reloaded it (the new unit is seen)
    assert plug["user_manager"] == "active" and plug["user_manager_stopped"] == "0"
    assert plug["sigterm_total"] == "0"
    assert plug["units_failed_total"] == "1"  # only B's pulled run


def test_desktop_notifications(plug):
    # Sent over root's session bus (notify-send, else busctl --user … Notify), seen by dbus-monitor: A and B
    # enrolled; B's pulled run and A's "no" said so too.
    assert plug["notify_enrolled"] == "2"
    assert plug["notify_not_enrolled"] == "2", plug["notify_bodies"]


def test_unconfigured_does_nothing_and_prefer_piv_enrolls_the_ccid_side(plug):
    assert plug["unconfigured"] == 'tokenbridge enroll: no "enroll" in the configuration; nothing done, nothing recorded.'
    assert json.loads(plug["unconfigured_memory"]) == {B: "enrolled"}
    # Typed at A's hidraw node, with prefer piv: the PIV side of the same token enrolls, as a second account.
    assert plug["piv_rc"] == "0", (plug["piv_out"], plug["pcscd_log"])
    assert f"Enrolled piv-20000001 ({A}) for bob" in plug["piv_out"]
    assert json.loads(plug["piv_regs"]) == ["7B1D#0001", "7B1D#0002", "7B1D#0002"]
    assert json.loads(plug["piv_memory"]) == {A: "enrolled", B: "enrolled"}
