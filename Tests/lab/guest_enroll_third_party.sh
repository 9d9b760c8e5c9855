#!/bin/bash
# Runs inside a lab guest booted with --systemd (Tests/lab/test_third_party_enroll.py): the plug-in enrollment of a
# FIDO2 key we did not write. solo1's firmware runs in the guest (Tools/third-party fido2 solo1) behind
# `virtual-token usbip --device fido-external`, so the kernel sees a USB key whose every report goes to solo1.
# The rules and the user unit are installed as a package would (Tools/install-udev); root's user manager gets the
# scripted pinentry (Tests/lab/guest_enroll_pinentry.sh); then the key is attached and nothing is typed:
# udev → SYSTEMD_USER_WANTS → tokenbridge-enroll@.service → tokenbridge enroll. Phases: plugged (enrolled),
# replugged (nothing asked). The shared plumbing is Tests/lab/guest_enroll_common.sh.
# Prints KEY=VALUE lines; the test asserts on them.
set -u
echo "uptime_at_start=$(cut -d' ' -f1 /proc/uptime)"  # the guest's clock (its boot, in a guest of its own)
vt="${TB_BIN:-$LAB_ROOT/.build/debug}"
tb="$vt/tokenbridge"
w=$(mktemp -d /tmp/plug3p.XXXXXX)
chmod 755 "$w"
export XDG_RUNTIME_DIR=/run/user/0 DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/0/bus
data=/root/.local/share/tokenbridge
# A guest the other --systemd modules ran in before (Tools/test's LAB_SYSTEMD_GUEST): their local data and
# configuration go, and the journal is read from here on (guest_enroll_common.sh).
rm -rf "$data" /root/.config/tokenbridge
journal_since="@$(date +%s)"
serial=41000002
usb="usb-1209-0001-$serial"
# The reference RP first (its Python start takes seconds under TCG), then the firmware and the USB/IP server.
python3 "$LAB_ROOT/Tools/rp/tokenbridge_rp.py" --port 0 --port-file "$w/rp.port" 2>"$w/rp.log" &
rp=$!
mkdir -p "$w/state"
t_key=$(cut -d' ' -f1 /proc/uptime)
"$LAB_ROOT/Tools/third-party" fido2 solo1 --socket "$w/key.sock" --state "$w/state" >"$w/key.log" 2>&1 &
key=$!
trap 'for p in $(usbip port 2>/dev/null | sed -n "s/^Port \([0-9]*\):.*/\1/p"); do usbip detach -p $p >/dev/null 2>&1; done
  kill $srv $key $rp 2>/dev/null; wait $key 2>/dev/null' EXIT
srv=
"$LAB_ROOT/Tools/install-udev" --bin "$tb" >"$w/install.log" 2>&1 || { cat "$w/install.log"; exit 90; }
sc="$w/scenario.json"
printf '{"answers": ["1234", "1234"]}\n' >"$sc"
env -u XDG_RUNTIME_DIR -u DBUS_SESSION_BUS_ADDRESS systemctl --user -M root@ set-environment \
  PINENTRY_PROGRAM="$LAB_ROOT/Tests/lab/guest_enroll_pinentry.sh" SCRIPTED_PINENTRY_SCENARIO="$sc" PATH="$PATH"
for _ in $(seq 300); do [ -S "$w/key.sock" ] && break; sleep 0.1; done
[ -S "$w/key.sock" ] || { echo "key_socket=missing"; cat "$w/key.log"; exit 92; }
echo "key_start=$(python3 -c "print(round($(cut -d' ' -f1 /proc/uptime) - $t_key, 1))")"
"$vt/virtual-token" usbip --listen 127.0.0.1:3262 --device fido-external --fido-socket "$w/key.sock" \
  --serial $serial --state-dir "$w" >"$w/server.log" 2>&1 &
srv=$!
for _ in $(seq 300); do [ -s "$w/rp.port" ] && break; sleep 0.2; done
url="http://127.0.0.1:$(cat "$w/rp.port")"
mkdir -p /root/.config/tokenbridge
printf '{"enroll": {"server": "%s", "onInsert": "auto"}}\n' "$url" >/root/.config/tokenbridge/config.json

. "$LAB_ROOT/Tests/lab/guest_enroll_common.sh"
fresh_pcscd
attach() {
  for _ in $(seq 100); do usbip --tcp-port 3262 list -r 127.0.0.1 >/dev/null 2>&1 && break; sleep 0.2; done
  usbip --tcp-port 3262 attach -r 127.0.0.1 -b 1-1 >/dev/null 2>&1 ||
    { echo "attach_failed=1"; cat "$w/server.log"; exit 91; }
}
detach() {
  local p
  p=$(usbip port 2>/dev/null | awk '/^Port/{p=$2} index($0, "127.0.0.1:3262/"){sub(":", "", p); print p}')
  usbip detach -p "$p" >/dev/null 2>&1
  for _ in $(seq 100); do [ -z "$(ls /sys/class/hidraw)" ] && break; sleep 0.1; done
}

echo "setup=$(python3 -c "print(round($(cut -d' ' -f1 /proc/uptime) - $t_key, 1))")"  # from the key's start to here

# Plugged in, nothing typed: one unit (the key has only a HID interface), a new PIN, then the registration's PIN.
t0=$(cut -d' ' -f1 /proc/uptime)
attach
wait_ended 1
t1=$(journalctl --no-pager -o short-monotonic --since "$journal_since" | grep -m1 ' Enrolled fido2-' | sed 's/^\[ *\([0-9.]*\)\].*/\1/')
echo "insert_to_enrolled=$(python3 -c "print(round($t1 - $t0, 1))" 2>/dev/null)"
echo "units=$(ended)"
echo "regs=$(regs)"
echo "enrolled=$(journal | grep -c '^Enrolled ')"
echo "enrolled_line=$(journal | grep -m1 '^Enrolled ')"
echo "failed=$(journal | grep -c '^Failed to start tokenbridge-enroll@')"
echo "getpins=$(getpins)"
echo "memory=$(memory)"
echo "rows=$(rows)"
# The answers came from solo1: its AAGUID, and the PIN the enrollment set.
node=$(fido2-token -L | cut -d: -f1 | head -1)
echo "info=$(fido2-token -I "$node" 2>&1 | grep -E '^(aaguid|pin retries|options):' | tr '\n' '|')"
echo "sigterm=$(journal | grep -c 'status=15/TERM')"

# Unplugged and plugged in again: nothing asked, nothing registered.
n=$(ended)
t2=$(cut -d' ' -f1 /proc/uptime)
detach
attach
wait_ended $((n + 1))
echo "replug=$(python3 -c "print(round($(cut -d' ' -f1 /proc/uptime) - $t2, 1))")"
echo "replug_units=$(($(ended) - n))"
echo "replug_remembered=$(journal | grep -c "$usb was enrolled before")"
echo "replug_getpins=$(getpins)"
echo "replug_regs=$(regs)"
echo "replug_rows=$(rows)"
echo "uptime_at_done=$(cut -d' ' -f1 /proc/uptime)"
echo "done=1"
