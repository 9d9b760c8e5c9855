"""The virtual PIV card behind a CCID interface over USB/IP: pcscd with libccid (libudev hotplug) drives it,
and real PC/SC clients (yubico-piv-tool, OpenSC's pkcs11-tool) and tokenbridge run their PIV flows through it."""
import json

from conftest import flows

READER = "Virtual Token CCID [CCID] (20000001) 00 00"
PKCS11 = "/usr/lib/x86_64-linux-gnu/opensc-pkcs11.so"


def test_pcscd_lists_the_reader_and_real_clients_use_the_card(devices):
    r = devices.sh(f"""pcsc_scan -r
yubico-piv-tool -r 'Virtual Token CCID' -a status
yubico-piv-tool -r 'Virtual Token CCID' -a verify-pin -P 123456 && echo VERIFIED
pkcs11-tool --module {PKCS11} -L""", attach=["ccid"])
    assert r.returncode == 0, r.stdout
    assert f"0: {READER}" in r.stdout.splitlines()
    assert "Serial Number:\t20000001" in r.stdout and "PIN tries left:\t3" in r.stdout
    assert "VERIFIED" in r.stdout.splitlines()
    assert f"Slot 0 (0x0): {READER}" in r.stdout and "PIV_II" in r.stdout


def test_udev_marks_the_ccid_interface_and_udevadm_test_applies_our_rule(devices):
    r = devices.sh("""i=$(grep -lx 0b /sys/bus/usb/devices/*/bInterfaceClass | head -1); i=${i%/bInterfaceClass}
udevadm info -q property -p "$i"
echo ---
udevadm test "$i" 2>&1 | grep -E '^(TOKENBRIDGE_TOKEN|DEVTYPE)='
echo ---
udevadm info -q property -p "${i%:*}" | grep -E '^ID_(SMARTCARD_READER|USB_INTERFACES)='""", attach=["ccid"])
    assert r.returncode == 0, r.stdout
    live, tested, device = r.stdout.split("---\n")
    assert "TOKENBRIDGE_TOKEN=ccid" in live.splitlines()
    assert tested.splitlines() == ["DEVTYPE=usb_interface", "TOKENBRIDGE_TOKEN=ccid"]
    assert sorted(device.splitlines()) == ["ID_SMARTCARD_READER=1", "ID_USB_INTERFACES=:0b0000:"]


def test_tokenbridge_piv_flows_through_ccid(devices):
    result = flows(devices, "piv", attach=["ccid"])
    steps = {s["cmd"].split(" --")[0]: s for s in result["steps"]}
    assert all(s["rc"] == 0 for s in result["steps"]), result["steps"]
    assert [(t["kind"], t["id"]) for t in json.loads(steps["tokens"]["stdout"])] == [("piv", "piv-20000001")]
    assert json.loads(steps["pin status"]["stdout"])["pin"]["retriesLeft"] == 3
    assert [r["aaid"] for r in result["registrations"]] == ["7B1D#0001"] and result["after"] == []
