"""One USB device with both interfaces (FIDO HID + CCID, as a YubiKey in FIDO+CCID mode), and what happens when
a device is pulled in the middle of an operation and plugged back in."""
import json


def test_composite_is_one_device_with_both_tokens(dut):
    vidpid = "1209:0001" if dut.virtual else dut.info["vidpid"]
    r = dut.sh(f"""lsusb -d {vidpid} | wc -l
lsusb -v -d {vidpid} 2>/dev/null | grep -E 'bNumInterfaces|bInterfaceClass|iSerial'
echo ---
fido2-token -L; pcsc_scan -r
echo ---
env -u TOKENBRIDGE_VIRTUAL_FIDO "${{TB_BIN:-$LAB_ROOT/.build/debug}}/tokenbridge" tokens --json""", kind="composite")
    assert r.returncode == 0, r.stdout
    usb, seen, tokens = r.stdout.split("---\n")
    lines = [" ".join(l.split()) for l in usb.splitlines()]
    listed = sorted(json.loads(tokens), key=lambda t: t["kind"])
    if dut.virtual:
        assert lines == ["1", "iSerial 3 20000001", "bNumInterfaces 2", "bInterfaceClass 3 Human Interface Device",
                         "bInterfaceClass 11 Chip/SmartCard"]
        assert seen.startswith(
            "/dev/hidraw0: vendor=0x1209, product=0x0001 (TokenBridge Virtual FIDO2 Key and PIV Card)")
        assert "0: Virtual Token CCID [CCID] (20000001) 00 00" in seen.splitlines()
        assert [t["kind"] for t in listed] == ["fido2", "piv"]
        # One physical token: both are on USB device usb-1209-0001-20000001 and name each other.
        assert {t["usbDevice"] for t in listed} == {"usb-1209-0001-20000001"}
        assert [t["sameDeviceAs"] for t in listed] == [["piv-20000001"], ["fido2-hidraw0"]]
    else:
        # A real token may have more interfaces (a YubiKey's OTP keyboard): FIDO HID and CCID on one device.
        assert lines[0] == "1" and f"iSerial 3 {dut.info['serial']}" in lines
        assert "bInterfaceClass 3 Human Interface Device" in lines and "bInterfaceClass 11 Chip/SmartCard" in lines
        fido = [t for t in listed if t["kind"] == "fido2"]
        piv = [t for t in listed if t["kind"] == "piv"]
        assert len(fido) == 1 and len(piv) == 1, listed
        vid, pid = dut.info["vidpid"].split(":")
        assert fido[0]["usbDevice"] == piv[0]["usbDevice"] == f"usb-{vid}-{pid}-{dut.info['serial']}"
        assert fido[0]["sameDeviceAs"] == [piv[0]["id"]] and piv[0]["sameDeviceAs"] == [fido[0]["id"]]


DETACH = r"""
set -u
vt="${TB_BIN:-$LAB_ROOT/.build/debug}"
w=$(mktemp -d /tmp/detach.XXXXXX)
"$vt/virtual-token" usbip --listen 127.0.0.1:3250 --device fido --state-dir "$w" --presence wait >"$w/server.log" 2>&1 &
srv=$!
trap 'kill $srv; usbip detach -p 0 >/dev/null 2>&1' EXIT
attach() {
  for _ in $(seq 100); do usbip --tcp-port 3250 list -r 127.0.0.1 >/dev/null 2>&1 && break; sleep 0.1; done
  usbip --tcp-port 3250 attach -r 127.0.0.1 -b 1-1 || exit 90
  for _ in $(seq 100); do [ -e /dev/hidraw0 ] && break; sleep 0.1; done
  udevadm settle -t 10
}
attach
export XDG_DATA_HOME=$w/d XDG_CONFIG_HOME=$w/c
printf '1234\n' >"$w/pin"
"$vt/tokenbridge" pin set --pin-fd 3 3<"$w/pin" || exit 91
# A registration that waits for a touch that never comes; the key is pulled meanwhile.
python3 "$LAB_ROOT/Tools/rp/tokenbridge_rp.py" --port 0 --port-file "$w/rp.port" 2>"$w/rp.log" &
rp=$!
for _ in $(seq 100); do [ -s "$w/rp.port" ] && break; sleep 0.1; done
"$vt/tokenbridge" register --username alice --server "http://127.0.0.1:$(cat "$w/rp.port")" --pin-fd 3 3<"$w/pin" \
  </dev/null >"$w/reg.out" 2>"$w/reg.err" &
reg=$!
for _ in $(seq 120); do grep -q "Touch your key" "$w/reg.err" && break; sleep 1; done
usbip detach -p 0 >/dev/null
wait $reg; echo "register-rc=$?"
cat "$w/reg.err" | tail -1
echo "authenticators=$("$vt/tokenbridge" authenticators --all --json | tr -d ' \n')"
echo "registrations=$(python3 -c "import urllib.request,sys; print(urllib.request.urlopen(sys.argv[1]).read().decode())" "http://127.0.0.1:$(cat "$w/rp.port")/_admin/registrations")"
kill $rp
attach
"$vt/tokenbridge" pin status --json | tr -d ' \n'; echo
"""


def test_detach_during_an_operation_then_reattach(devices):
    r = devices.sh(DETACH)
    assert r.returncode == 0, r.stdout
    lines = r.stdout.splitlines()
    assert "register-rc=10" in lines, r.stdout
    assert lines[lines.index("register-rc=10") + 1] == (
        "tokenbridge: The token was removed from /dev/hidraw0 during the operation; it may not have completed. "
        "Insert it and check with tokenbridge pin status.")
    assert "authenticators=[]" in lines and "registrations=[]" in lines
    status = json.loads(lines[-1])
    assert status["pin"]["retriesLeft"] == 8 and status["token"] == "fido2-hidraw0"
