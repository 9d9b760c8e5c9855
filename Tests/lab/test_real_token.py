"""A resident token — a real one passed into the guest (`LAB_PASSTHROUGH=VID:PID TOKENBRIDGE_HIL=1
TOKENBRIDGE_HIL_SERIAL=...`) or the stand-in (`LAB_STANDIN=composite`): the kernel, udev, libfido2 and pcscd see it
as they see the virtual devices, read-only (no PIN is sent, nothing is written). The other lab tests that take the
`dut` fixture run against it too (conftest). Skipped, with the reason, when no token is resident."""
import json

import pytest


def test_resident_token_seen_like_the_virtual_one(dut):
    if dut.virtual:
        pytest.skip("no resident token: set LAB_PASSTHROUGH=VID:PID, TOKENBRIDGE_HIL=1, TOKENBRIDGE_HIL_SERIAL "
                    "(a real token) or LAB_STANDIN=composite")
    info = dut.info
    r = dut.sh("""udevadm settle -t 10
for n in /dev/hidraw*; do udevadm info -q property -n $n 2>/dev/null | grep -E '^(ID_FIDO_TOKEN|TOKENBRIDGE_TOKEN)='; done
echo ---; fido2-token -L; echo ---
pcsc_scan -r; echo ---
env -u TOKENBRIDGE_VIRTUAL_FIDO "${TB_BIN:-$LAB_ROOT/.build/debug}/tokenbridge" tokens --json""", kind="fido"
               if info["fido"] else "ccid")
    udev, fido, readers, tokens = r.stdout.split("---\n")
    kinds = {k for t in json.loads(tokens) for k in t.get("kinds", [t["kind"]])}
    if info["fido"]:
        assert "ID_FIDO_TOKEN=1" in udev.splitlines() and "TOKENBRIDGE_TOKEN=fido2" in udev.splitlines()
        assert fido.startswith(f"/dev/{info['hidraw']}") and "fido2" in kinds
    if info["ccid"]:
        assert readers.startswith(f"0: {info['reader']}") and "piv" in kinds
    assert info["fido"] or info["ccid"], "the resident token has neither a FIDO nor a CCID interface"
