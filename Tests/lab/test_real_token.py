"""A real token passed into the guest (`LAB_PASSTHROUGH=VID:PID TOKENBRIDGE_HIL=1 TOKENBRIDGE_HIL_SERIAL=...`):
the same kernel, udev, libfido2 and pcscd checks as for the virtual devices, read-only (no PIN is sent, nothing
is written to the token). Skipped, with the reason, when no real token is passed through."""
import json

import pytest

from conftest import PASSTHROUGH


@pytest.fixture
def real(guest):
    if not PASSTHROUGH:
        pytest.skip("no real token: set LAB_PASSTHROUGH=VID:PID, TOKENBRIDGE_HIL=1, TOKENBRIDGE_HIL_SERIAL")
    r = guest.sh(f"lsusb -d {PASSTHROUGH} -v 2>/dev/null | grep -E 'bInterfaceClass'")
    assert r.returncode == 0, f"{PASSTHROUGH} not in the guest: {r.stdout}"
    return guest, {"fido": " 3 Human Interface Device" in r.stdout, "ccid": "11 Chip/SmartCard" in r.stdout}


def test_real_token_seen_like_the_virtual_one(real):
    guest, has = real
    r = guest.sh("""udevadm settle -t 10
for n in /dev/hidraw*; do udevadm info -q property -n $n 2>/dev/null | grep -E '^(ID_FIDO_TOKEN|TOKENBRIDGE_TOKEN)='; done
echo ---; fido2-token -L; echo ---
for _ in $(seq 50); do pcsc_scan -r 2>/dev/null | grep -q '^0:' && break; sleep 0.2; done; pcsc_scan -r; echo ---
env -u TOKENBRIDGE_VIRTUAL_FIDO "${TB_BIN:-$LAB_ROOT/.build/debug}/tokenbridge" tokens --json""")
    udev, fido, readers, tokens = r.stdout.split("---\n")
    kinds = {t["kind"] for t in json.loads(tokens)}
    if has["fido"]:
        assert "ID_FIDO_TOKEN=1" in udev.splitlines() and "TOKENBRIDGE_TOKEN=fido2" in udev.splitlines()
        assert fido.startswith("/dev/hidraw") and "fido2" in kinds
    if has["ccid"]:
        assert readers.startswith("0: ") and "piv" in kinds
    assert has["fido"] or has["ccid"], "the passed-through device has neither a FIDO nor a CCID interface"
