"""tokenbridge watch and the FIDO2 cool-down resume in the lab (plain guest: kernel, udev, pcscd with libccid):
a composite device (FIDO HID + CCID in one USB device) attached and detached through vhci-hcd while `watch`
runs is one token (one id for both interfaces), added once and removed once; a FIDO2 key in cool-down (3 wrong
PINs) is detached and re-attached and the PIN change goes on."""
import json

ATTACH = r"""
set -u
vt="${TB_BIN:-$LAB_ROOT/.build/debug}"
w=$(mktemp -d /tmp/watch.XXXXXX)
"$vt/virtual-token" usbip --listen 127.0.0.1:3251 --device DEVICE --state-dir "$w" >"$w/server.log" 2>&1 &
srv=$!
cleanup() { [ -n "${watch:-}" ] && kill $watch 2>/dev/null; usbip detach -p 0 >/dev/null 2>&1; kill $srv; wait; }
trap cleanup EXIT
attach() {
  for _ in $(seq 100); do usbip --tcp-port 3251 list -r 127.0.0.1 >/dev/null 2>&1 && break; sleep 0.1; done
  usbip --tcp-port 3251 attach -r 127.0.0.1 -b 1-1 || exit 90
}
waitfor() { for _ in $(seq 300); do grep -q "$1" "$2" && return 0; sleep 0.1; done; echo "timed out waiting for $1 in $2"; cat "$2"; exit 91; }
export XDG_DATA_HOME=$w/d XDG_CONFIG_HOME=$w/c
"""

WATCH = ATTACH.replace("DEVICE", "composite") + r"""
env -u TOKENBRIDGE_VIRTUAL_FIDO TOKENBRIDGE_WATCH_DEBUG=1 "$vt/tokenbridge" watch --json >"$w/watch.out" 2>"$w/watch.err" &
watch=$!
waitfor watching "$w/watch.err"
start=$(date +%s%N)
attach
waitfor '"added"' "$w/watch.out"
echo "attach-to-event-ms=$(( ($(date +%s%N) - start) / 1000000 ))"
udevadm settle -t 10
env -u TOKENBRIDGE_VIRTUAL_FIDO "$vt/tokenbridge" tokens --json | tr -d ' \n'; echo
usbip detach -p 0 >/dev/null
waitfor '"removed"' "$w/watch.out"
sleep 2  # late interface events (hidraw node, pcscd's reader) must not add lines
kill -TERM $watch; wait $watch; echo "watch-rc=$?"; watch=
cat "$w/watch.err" >&2
echo ---
cat "$w/watch.out"
"""


def test_composite_attach_and_detach_is_one_token(devices):
    r = devices.sh(WATCH, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    head, _, events = r.stdout.partition("---\n")
    assert "watch-rc=0" in head, r.stdout
    tokens = json.loads(next(l for l in head.splitlines() if l.startswith("[")))
    [token] = tokens  # one physical token, one entry (tokens --json)
    ids = sorted(token["ids"])
    assert ids == ["fido2-hidraw0", "piv-20000001"], tokens
    lines = [json.loads(l) for l in events.splitlines()]
    kinds = [e["event"] for e in lines if not e["event"].startswith("reader-")]
    assert kinds == ["added", "removed"], events
    added = next(e for e in lines if e["event"] == "added")
    removed = next(e for e in lines if e["event"] == "removed")
    # One token for both interfaces: the PIV card's id (stable across replugs), both ids, one USB device.
    # (stderr: the watch's raw inputs with their times, TOKENBRIDGE_WATCH_DEBUG=1)
    assert added["token"] == removed["token"] == "piv-20000001", events + r.stderr
    assert added["ids"] == removed["ids"] == ids, events
    assert added["capabilities"] == ["fido2", "piv"], events
    assert added["device"] == removed["device"] == "usb-1209-0001-20000001", events
    assert "USB hotplug: libusb" in r.stdout, r.stdout  # the lab merges the guest's stderr into stdout


COOL_DOWN = ATTACH.replace("DEVICE", "fido") + r"""
attach
for _ in $(seq 100); do [ -e /dev/hidraw0 ] && break; sleep 0.1; done
udevadm settle -t 10
printf '1234\n' >"$w/pin"
"$vt/tokenbridge" pin set --pin-fd 3 3<"$w/pin" || exit 92
# Three wrong current PINs (each with a new one), then the right one: the third wrong one puts the key in
# cool-down (PIN_AUTH_BLOCKED), the command waits for a re-insert and then reads the next pair.
printf '0000\n5678\n0001\n5678\n0002\n5678\n1234\n5678\n' >"$w/pins"
"$vt/tokenbridge" pin change --pin-fd 3 --timeout 120 3<"$w/pins" </dev/null >"$w/change.out" 2>"$w/change.err" &
change=$!
waitfor "re-insert" "$w/change.err"
sleep 1
kill -0 $change && echo "still-waiting"
usbip detach -p 0 >/dev/null
sleep 1
attach
wait $change; echo "change-rc=$?"
cat "$w/change.err" "$w/change.out"
echo ---
printf '5678\n' >"$w/new"
"$vt/tokenbridge" pin status --json | tr -d ' \n'; echo
"""


def test_fido2_cool_down_resumes_after_a_re_attach(devices):
    r = devices.sh(COOL_DOWN, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    head, _, status = r.stdout.partition("---\n")
    assert "still-waiting" in head and "change-rc=0" in head, r.stdout
    assert "Too many wrong PINs in a row: remove and re-insert your key (fido2-hidraw0)" in head, head
    assert "The key is back." in head and "PIN changed." in head, head
    st = json.loads(status.strip())
    assert st["token"] == "fido2-hidraw0" and st["pin"]["retriesLeft"] == 8, st
