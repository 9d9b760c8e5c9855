"""Plug-in enrollment (`tokenbridge enroll`, what tokenbridge-enroll@.service runs) in the lab with a composite
token: its two udev devices start enroll at the same moment and exactly one enrollment happens; the decision is
remembered (a replug asks nothing) until --reset; `prefer` picks the side; without configuration nothing happens.
Tests/lab/guest_enroll.sh drives it inside the guest."""
import json

from conftest import ROOT


def test_one_enrollment_per_physical_token(devices):
    r = devices.run(str(ROOT / "Tests" / "lab" / "guest_enroll.sh"), attach=["composite"], timeout=600)
    assert r.returncode == 0, r.stdout[-3000:]
    out = dict(l.split("=", 1) for l in r.stdout.splitlines() if "=" in l and l.split("=", 1)[0].isidentifier())
    assert out["unconfigured"] == 'tokenbridge enroll: no "enroll" in the configuration; nothing done, nothing recorded.'
    assert out["unconfigured_regs"] == "[]"
    # Both events ran; one enrolled (the FIDO2 side: prefer defaults to fido2), the other left quietly.
    assert (out["a_rc"], out["b_rc"]) == ("0", "0"), r.stdout
    enrolled = [o for o in (out["a_out"], out["b_out"]) if "Enrolled fido2-hidraw0 (usb-1209-0001-20000001)" in o]
    assert len(enrolled) == 1 and [o for o in (out["a_out"], out["b_out"]) if o not in enrolled] == [""], r.stdout
    assert json.loads(out["regs"]) == ["7B1D#0002"]
    assert json.loads(out["memory"]) == {"usb-1209-0001-20000001": "enrolled"}
    assert out["again"].startswith("tokenbridge enroll: usb-1209-0001-20000001 was enrolled before")
    assert json.loads(out["regs_again"]) == ["7B1D#0002"]
    assert out["forget"] == "Forgot usb-1209-0001-20000001: the next plug-in asks again."
    assert out["piv_rc"] == "0" and "Enrolled piv-20000001 (usb-1209-0001-20000001) for bob" in out["piv_out"]
    assert json.loads(out["regs_piv"]) == ["7B1D#0002", "7B1D#0001"]
