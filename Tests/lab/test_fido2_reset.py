"""`tokenbridge fido2 reset` in the lab: a USB/IP detach and re-attach is the replug, the reset window starts at
USB attach, and a different key plugged in instead is refused (Tests/lab/guest_reset.py drives it)."""
import json

from conftest import ROOT


def test_reset_with_a_usb_replug(devices):
    r = devices.run("python3", str(ROOT / "Tests" / "lab" / "guest_reset.py"), timeout=600)
    assert r.returncode == 0, r.stdout[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert [x["username"] for x in out["registered"]] == ["alice"]
    code, text = out["fido2_token_rps"]
    assert code == 0 and "tokenbridge.uaf" in text, text  # our discoverable credential, as fido2-token lists it

    code, text = out["wrong_key"]
    assert code == 34, text
    assert "Nothing was reset" in text
    assert out["after_wrong_key"] == out["registered"] and len(out["local_after_wrong_key"]) == 1

    code, text = out["reset"]
    assert code == 0, text
    assert "alice at http://127.0.0.1" in text and "deregistered at the server and removed here" in text
    assert out["after_reset"] == [] and out["local_after_reset"] == []
    assert "noclientPin" in out["info_after_reset"]

    assert out["fido2_token_reset"][0] == 0, out["fido2_token_reset"]
    assert "noclientPin" in out["info_after_fido2_token_reset"]
