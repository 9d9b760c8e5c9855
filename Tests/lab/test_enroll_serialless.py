"""A serial-less CCID device enrolls its own card, never one in another reader, with the real pcscd and libccid: two
CCID devices without a USB serial (virtual-token usbip --no-usb-serial), each with its card. pcscd names their readers
alike ("Virtual Token CCID [CCID] 00 00" and "… 01 00": nothing of the device in them), so `enroll --device` finds each
device's reader by libccid's SCARD_ATTR_CHANNEL_ID (USB bus and address) against sysfs busnum/devnum: each device
enrolls its own card. On 633cbc3 both enrolled the first reader's card."""
import re


SCRIPT = r"""
set -u
vt="${TB_BIN:-$LAB_ROOT/.build/debug}"
w=$(mktemp -d /tmp/serialless.XXXXXX)
"$vt/virtual-token" usbip --listen 127.0.0.1:3252 --device ccid --device ccid --no-usb-serial --state-dir "$w" \
  >"$w/server.log" 2>&1 &
srv=$!
cleanup() {
  for p in $(usbip port 2>/dev/null | awk '/^Port/{p=$2} /127.0.0.1:3252\//{sub(":", "", p); print p}'); do
    usbip detach -p $p >/dev/null 2>&1
  done
  kill $srv $rp 2>/dev/null
}
rp=""
trap cleanup EXIT
for _ in $(seq 100); do usbip --tcp-port 3252 list -r 127.0.0.1 >/dev/null 2>&1 && break; sleep 0.1; done
usbip --tcp-port 3252 attach -r 127.0.0.1 -b 1-1 || exit 90
usbip --tcp-port 3252 attach -r 127.0.0.1 -b 1-2 || exit 90
udevadm settle -t 10
for _ in $(seq 200); do [ "$(pcsc_scan -r 2>/dev/null | grep -c '^[0-9]: ')" -ge 2 ] && break; sleep 0.1; done
pcsc_scan -r 2>/dev/null | grep '^[0-9]: '
devs=""
for d in /sys/bus/usb/devices/*; do
  [ "$(cat $d/idVendor 2>/dev/null)" = 1209 ] || continue
  echo "device ${d##*/} serial=$(cat $d/serial 2>/dev/null || echo none) bus=$(cat $d/busnum) address=$(cat $d/devnum)"
  devs="$devs ${d##*/}"
done
python3 "$LAB_ROOT/Tools/rp/tokenbridge_rp.py" --port 0 --port-file "$w/rp.port" 2>"$w/rp.log" &
rp=$!
for _ in $(seq 100); do [ -s "$w/rp.port" ] && break; sleep 0.1; done
export XDG_DATA_HOME=$w/d XDG_CONFIG_HOME=$w/c XDG_RUNTIME_DIR=$w/run
mkdir -p "$XDG_CONFIG_HOME/tokenbridge" "$XDG_RUNTIME_DIR"
chmod 700 "$XDG_RUNTIME_DIR"
printf '{"enroll": {"server": "http://127.0.0.1:%s", "username": "alice", "onInsert": "auto", "prefer": "piv"}}\n' \
  "$(cat "$w/rp.port")" >"$XDG_CONFIG_HOME/tokenbridge/config.json"
printf '123456\n' >"$w/pin"
for d in $devs; do
  "$vt/tokenbridge" enroll --device "$d:1.0" --pin-fd 3 3<"$w/pin" </dev/null >"$w/out" 2>"$w/err"
  echo "enroll $d rc=$? $(cat "$w/out" "$w/err" | tr '\n' ' ')"
done
"""


def test_serial_less_ccid_devices_each_enroll_their_own_card(devices):
    r = devices.sh(SCRIPT, timeout=900)
    out = r.stdout
    assert r.returncode == 0, out + r.stderr
    readers = [l for l in out.splitlines() if re.match(r"^\d: ", l)]
    assert readers == ["0: Virtual Token CCID [CCID] 00 00", "1: Virtual Token CCID [CCID] 01 00"], out
    listed = [l for l in out.splitlines() if l.startswith("device ")]
    assert len(listed) == 2 and all("serial=none" in l for l in listed), out
    enrolled = re.findall(r"^enroll (\S+) rc=0 Enrolled (piv-\d+) \(usb-1209-0001-port-\1\)", out, re.M)
    assert len(enrolled) == 2, out
    assert sorted(t for _, t in enrolled) == ["piv-20000001", "piv-20000002"], out
