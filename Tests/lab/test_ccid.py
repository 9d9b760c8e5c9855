"""A PIV card behind a CCID interface — the virtual one over USB/IP, or a resident token (see conftest): pcscd with
libccid (libudev hotplug) drives it, and real PC/SC clients (yubico-piv-tool, OpenSC's pkcs11-tool) and tokenbridge
run their PIV flows through it."""
import json

from conftest import flows

READER = "Virtual Token CCID [CCID] (20000001) 00 00"
PKCS11 = "/usr/lib/x86_64-linux-gnu/opensc-pkcs11.so"


def test_pcscd_lists_the_reader_and_real_clients_read_the_card(dut):
    r = dut.sh(f"""pcsc_scan -r
r=$(pcsc_scan -r | sed -n 's/^0: //p')
yubico-piv-tool -r "$r" -a status
pkcs11-tool --module {PKCS11} -L""", kind="ccid")
    assert r.returncode == 0, r.stdout
    reader = READER if dut.virtual else dut.info["reader"]
    serial = "20000001" if dut.virtual else dut.info["serial"]
    assert f"0: {reader}" in r.stdout.splitlines()
    assert f"Serial Number:\t{serial}" in r.stdout and "PIN tries left:\t" in r.stdout
    if dut.virtual:
        assert "PIN tries left:\t3" in r.stdout
    assert f"Slot 0 (0x0): {reader}" in r.stdout and "PIV_II" in r.stdout


def test_yubico_piv_tool_verifies_the_pin(dut):
    dut.destructive("a PIN attempt (yubico-piv-tool verify-pin)")
    # The PIN is the factory default of any PIV card (and of ours); yubico-piv-tool takes it only on argv.
    r = dut.sh("""r=$(pcsc_scan -r | sed -n 's/^0: //p')
yubico-piv-tool -r "$r" -a verify-pin -P 123456 && echo VERIFIED""", kind="ccid")
    assert r.returncode == 0, r.stdout
    assert "VERIFIED" in r.stdout.splitlines()


def test_udev_marks_the_ccid_interface_and_udevadm_test_applies_our_rule(dut):
    r = dut.sh("""i=$(grep -lx 0b /sys/bus/usb/devices/*/bInterfaceClass | head -1); i=${i%/bInterfaceClass}
udevadm info -q property -p "$i"
echo ---
udevadm test "$i" 2>&1 | grep -E '^(TOKENBRIDGE_TOKEN|DEVTYPE)='
echo ---
udevadm info -q property -p "${i%:*}" | grep -E '^ID_(SMARTCARD_READER|USB_INTERFACES)='""", kind="ccid")
    assert r.returncode == 0, r.stdout
    live, tested, device = r.stdout.split("---\n")
    assert "TOKENBRIDGE_TOKEN=ccid" in live.splitlines()
    assert tested.splitlines() == ["DEVTYPE=usb_interface", "TOKENBRIDGE_TOKEN=ccid"]
    if dut.virtual:
        assert sorted(device.splitlines()) == ["ID_SMARTCARD_READER=1", "ID_USB_INTERFACES=:0b0000:"]
    else:
        assert "ID_SMARTCARD_READER=1" in device.splitlines() and ":0b0000:" in device


def test_tokenbridge_piv_flows_through_ccid(dut):
    result = flows(dut, "piv")
    steps = {s["cmd"].split(" --")[0]: s for s in result["steps"]}
    assert all(s["rc"] == 0 for s in result["steps"]), result["steps"]
    listed = json.loads(steps["tokens"]["stdout"])
    if dut.virtual:
        assert [(t["kind"], t["id"]) for t in listed] == [("piv", "piv-20000001")]
    else:
        assert len([t for t in listed if "piv" in t.get("kinds", [t["kind"]])]) == 1
    assert json.loads(steps["pin status"]["stdout"])["pin"]["retriesLeft"] == 3  # PIV's factory default, ours too
    assert [r["aaid"] for r in result["registrations"]] == ["7B1D#0001"] and result["after"] == []


def test_pkcs11_tool_signs_with_a_key_tokenbridge_generated(dut):
    """OpenSC's PKCS#11 module through pcscd + libccid: our key (tokenbridge key generate), a certificate imported
    with yubico-piv-tool (OpenSC shows a PIV key only with one), a signature by pkcs11-tool that openssl verifies."""
    dut.destructive("key generation in slot 9a and a PIN attempt (pkcs11-tool --login)")
    r = dut.sh(f"""set -eu
tb="${{TB_BIN:-$LAB_ROOT/.build/debug}}/tokenbridge"; w=$(mktemp -d)
r=$(pcsc_scan -r | sed -n 's/^0: //p')
id=$("$tb" tokens --json | grep -o '"piv-[^"]*"' | head -1 | tr -d '"')
"$tb" key generate --token "$id" --slot 9a >$w/pub.pem
openssl ecparam -name prime256v1 -genkey -noout -out $w/ca.key
openssl x509 -new -subj "/CN=tokenbridge lab" -key $w/ca.key -force_pubkey $w/pub.pem -days 2 -out $w/cert.pem
yubico-piv-tool -r "$r" -a import-certificate -s 9a -i $w/cert.pem
printf 'signed through PKCS#11 over CCID' >$w/data
openssl dgst -sha256 -binary $w/data >$w/digest
pkcs11-tool --module {PKCS11} --login --pin 123456 --sign --mechanism ECDSA --id 01 -i $w/digest \\
  --signature-format openssl -o $w/sig
openssl dgst -sha256 -verify $w/pub.pem -signature $w/sig $w/data""", kind="ccid")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == "Verified OK", r.stdout
