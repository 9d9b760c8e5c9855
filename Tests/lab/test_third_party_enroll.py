"""The plug-in enrollment through systemd with a FIDO2 key we did not write. solo1's firmware (Tools/third-party fido2
solo1, in the guest) behind `virtual-token usbip --device fido-external` is attached to a guest booted with --systemd;
the packaged-as-installed user unit (Tools/install-udev) enrolls it with no command typed: a registration at the
reference RP in the guest, one "Enrolled" line, one enrollment; a replug asks nothing. A --systemd guest (about 16 s
to boot: one of its own, or the one Tools/test shares, LAB_SYSTEMD_GUEST) plus the flow;
Tests/lab/guest_enroll_third_party.sh drives it."""
import json
import subprocess
import time

import pytest

from conftest import RESIDENT, ROOT, _lab_unavailable, _usbip_unavailable, systemd_run

THIRD_PARTY = ROOT / "Tools" / "third-party"
USB = "usb-1209-0001-41000002"
SOLO1_AAGUID = "0076631bd4a0427f57730ec71c9e0279"


@pytest.fixture(scope="module")
def plug():
    reason = _lab_unavailable() or _usbip_unavailable()
    if reason:
        pytest.skip(reason)
    if RESIDENT:
        pytest.skip("boots a guest of its own with solo1 as its only FIDO device: not run with a resident token")
    if not THIRD_PARTY.exists():
        pytest.skip("Tools/third-party is not in this tree (it builds and runs solo1)")
    b = subprocess.run([str(THIRD_PARTY), "build", "solo1"], capture_output=True, text=True, timeout=900)
    assert b.returncode == 0, f"Tools/third-party build solo1 failed: {b.stdout[-2000:]}{b.stderr[-2000:]}"
    started = time.monotonic()
    r = systemd_run("guest_enroll_third_party.sh", timeout=900)
    out = dict(l.split("=", 1) for l in r.stdout.splitlines() if "=" in l and l.split("=", 1)[0].isidentifier())
    assert r.returncode == 0 and out.get("done") == "1", r.stdout[-4000:] + r.stderr[-2000:]
    script = float(out["uptime_at_done"]) - float(out["uptime_at_start"])
    print(f"\nsolo1 plug-in enrollment: lab run {time.monotonic() - started:.0f} s; on the guest's clock: up "
          f"{out['uptime_at_start']} s at the start, the script {script:.1f} s (solo1 start {out['key_start']} s while the RP "
          f"starts and the rules install (about 2.4 s alone), setup {out['setup']} s, insert→enrolled "
          f"{out['insert_to_enrolled']} s, replug {out['replug']} s)")
    return out


def test_plugging_in_solo1_enrolls_it_once(plug):
    assert plug["units"] == "1" and plug["failed"] == "0", plug  # one unit: the key has only a HID interface
    assert json.loads(plug["regs"]) == ["7B1D#0002"]
    assert plug["enrolled"] == "1"
    assert plug["enrolled_line"].startswith(f"Enrolled fido2-hidraw0 ({USB}) for root at http://127.0.0.1:"), plug
    assert plug["getpins"] == "2"  # solo1 came without a PIN: the new PIN, then the registration's
    assert json.loads(plug["memory"]) == {USB: "enrolled"}
    assert plug["rows"].split() == ["fido2-hidraw0:registered"]
    # solo1 answered (its AAGUID), and now has the PIN the enrollment set, no attempt spent.
    info = plug["info"].split("|")
    assert f"aaguid: {SOLO1_AAGUID}" in info, plug["info"]
    assert "pin retries: 8" in info, plug["info"]
    assert any(l.startswith("options:") and "clientPin" in l and "noclientPin" not in l for l in info), plug["info"]
    assert plug["sigterm"] == "0"
    assert float(plug["insert_to_enrolled"]) > 0


def test_replugging_solo1_asks_nothing(plug):
    assert plug["replug_units"] == "1"
    assert int(plug["replug_remembered"]) >= 1
    assert plug["replug_getpins"] == plug["getpins"]  # no new GETPIN
    assert json.loads(plug["replug_regs"]) == ["7B1D#0002"]
    assert plug["replug_rows"].split() == ["fido2-hidraw0:registered"]
