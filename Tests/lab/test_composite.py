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
        # One physical token, one entry: named by the card's id, with both ids, kinds and capabilities.
        [t] = listed
        assert (t["id"], t["ids"], t["kinds"]) == ("piv-20000001", ["piv-20000001", "fido2-hidraw0"], ["piv", "fido2"])
        assert t["usbDevice"] == "usb-1209-0001-20000001" and "sameDeviceAs" not in t
        assert {"fido2", "hmac-secret"} <= set(t["capabilities"]) and t["fido2"]["options"]["clientPin"] is False
        assert t["pin"]["retriesLeft"] == 3 and "fido2PIN" not in t  # a fresh key: no PIN yet
    else:
        # A real token may have more interfaces (a YubiKey's OTP keyboard): FIDO HID and CCID on one device.
        assert lines[0] == "1" and f"iSerial 3 {dut.info['serial']}" in lines
        assert "bInterfaceClass 3 Human Interface Device" in lines and "bInterfaceClass 11 Chip/SmartCard" in lines
        [t] = [t for t in listed if t.get("usbDevice") == f"usb-{dut.info['vidpid'].replace(':', '-')}-{dut.info['serial']}"]
        assert t["kinds"] == ["piv", "fido2"] and t["id"] == t["ids"][0] and t["ids"][1].startswith("fido2-hidraw")


def test_token_takes_either_id_of_a_composite_token(devices):
    """--token with the FIDO2 key's id names the PIV card of the same USB device for a PIV command, and back."""
    r = devices.sh("""tb="${TB_BIN:-$LAB_ROOT/.build/debug}/tokenbridge"
export XDG_DATA_HOME=$(mktemp -d) XDG_CONFIG_HOME=$(mktemp -d)
"$tb" key generate --slot 9c --token fido2-hidraw0 >/dev/null; echo "generate=$?"
"$tb" key public --slot 9c --token fido2-hidraw0 | head -1
"$tb" fido2 info --token piv-20000001 --json | python3 -c "import json,sys; print('fido2-info', json.load(sys.stdin)['token'])"
"$tb" key public --slot 9c --token fido2-hidraw9; echo "unknown=$?"
""", attach=["composite"])
    lines = r.stdout.splitlines()
    assert "generate=0" in lines and "-----BEGIN PUBLIC KEY-----" in lines, r.stdout
    assert "fido2-info fido2-hidraw0" in lines, r.stdout
    assert "unknown=4" in lines, r.stdout


DETACH = r"""
set -u
vt="${TB_BIN:-$LAB_ROOT/.build/debug}"
w=$(mktemp -d /tmp/detach.XXXXXX)
"$vt/virtual-token" usbip --listen 127.0.0.1:3250 --device fido --state-dir "$w" --presence wait >"$w/server.log" 2>&1 &
srv=$!
trap 'kill $srv 2>/dev/null; usbip detach -p 0 >/dev/null 2>&1' EXIT
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
# The simulator stops cleanly on SIGTERM (OpenSSL's exit-time clean-up once crashed it here as its threads ended).
kill $srv; wait $srv; echo "server-rc=$?"
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
    assert lines[-1] == "server-rc=0", r.stdout
    status = json.loads(lines[-2])
    assert status["pin"]["retriesLeft"] == 8 and status["token"] == "fido2-hidraw0"
