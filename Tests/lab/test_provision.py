"""`tokenbridge provision` of USB tokens through the real kernel path: a composite token (its PIV card over CCID:
usbip, the kernel, libccid, pcscd) and a FIDO2 key (its hidraw node, libfido2's enumeration), attached over USB/IP
into the guest, against the reference RP on the guest's loopback (Tests/lab/guest_provision.py)."""
import json

from conftest import ROOT


def test_provision_of_a_composite_token_and_a_fido2_key(devices):
    r = devices.run("python3", str(ROOT / "Tests" / "lab" / "guest_provision.py"), attach=["composite", "fido"],
                    timeout=600)
    assert r.returncode == 0, r.stdout[-3000:]
    f = json.loads(r.stdout.strip().splitlines()[-1])
    assert f["rc"] == 0, f["stderr"]
    # Two USB devices, two tokens: the composite one (both kinds) and the key.
    assert sorted(tuple(t.get("kinds", [t["kind"]])) for t in f["tokens"]) == [("fido2",), ("piv", "fido2")]
    rows = {r["username"]: r for r in f["report"]["rows"]}
    assert [(rows[u]["kind"], rows[u]["status"]) for u in ("carduser", "keyuser")] == [("piv", "done"),
                                                                                      ("fido2", "done")]
    assert rows["carduser"]["aaid"] == "7B1D#0001" and rows["keyuser"]["aaid"] == "7B1D#0002"
    assert rows["carduser"]["serial"] == "20000001"  # the card's serial through CCID
    assert "forcePINChange" in rows["keyuser"]["note"]
    assert {(g["username"], g["keyID"]) for g in f["registrations"]} == {
        (r["username"], r["keyID"]) for r in rows.values()}
    # The sealed PINs sign in: the card's at once; the key's is refused (16) until the PIN change.
    assert f["signIn"]["carduser"]["rcs"] == [0] and f["signIn"]["carduser"]["token"] == "piv-20000001"
    assert f["signIn"]["keyuser"]["rcs"] == [16, 0, 0]
