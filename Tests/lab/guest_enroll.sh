#!/bin/bash
# Runs inside the lab guest (not collected by pytest), with a composite device attached (LAB_ATTACH=composite):
# the two udev devices of one token (its hidraw node and its CCID interface) each start `tokenbridge enroll` at
# the same moment, as udev would. Prints KEY=VALUE lines; the host-side test asserts on them.
set -u
vt="${TB_BIN:-$LAB_ROOT/.build/debug}"
w=$(mktemp -d /tmp/enroll.XXXXXX)
export XDG_DATA_HOME=$w/d XDG_CONFIG_HOME=$w/c XDG_RUNTIME_DIR=$w/run
mkdir -p "$XDG_CONFIG_HOME/tokenbridge" "$XDG_RUNTIME_DIR"
python3 "$LAB_ROOT/Tools/rp/tokenbridge_rp.py" --port 0 --port-file "$w/rp.port" 2>"$w/rp.log" &
rp=$!
trap 'kill $rp' EXIT
for _ in $(seq 100); do [ -s "$w/rp.port" ] && break; sleep 0.2; done
url="http://127.0.0.1:$(cat "$w/rp.port")"
regs() { python3 -c "import urllib.request,sys,json; print(json.dumps([r['aaid'] for r in json.load(urllib.request.urlopen(sys.argv[1]))]))" "$url/_admin/registrations"; }
iface=$(basename "$(dirname "$(grep -lx 0b /sys/bus/usb/devices/*/bInterfaceClass | head -1)")")
hid=$(basename /sys/class/hidraw/hidraw*)

echo "unconfigured=$("$vt/tokenbridge" enroll --device "$hid" 2>&1)"
echo "unconfigured_regs=$(regs)"

printf '{"enroll": {"server": "%s", "onInsert": "auto"}}\n' "$url" >"$XDG_CONFIG_HOME/tokenbridge/config.json"
# New PIN for the FIDO2 key (it has none), then the PIN for the registration.
printf '1234\n1234\n' >"$w/pins"
"$vt/tokenbridge" enroll --device "$hid" --pin-fd 3 3<"$w/pins" >"$w/a.out" 2>"$w/a.err" &
a=$!
"$vt/tokenbridge" enroll --device "$iface" --pin-fd 3 3<"$w/pins" >"$w/b.out" 2>"$w/b.err" &
b=$!
wait $a; echo "a_rc=$?"; wait $b; echo "b_rc=$?"
echo "a_out=$(cat "$w/a.out" "$w/a.err" | tr '\n' ' ')"
echo "b_out=$(cat "$w/b.out" "$w/b.err" | tr '\n' ' ')"
echo "regs=$(regs)"
echo "memory=$(tr -d ' \n' <"$XDG_DATA_HOME/tokenbridge/enrollment.json")"
# The replug: both events again; nothing is asked or registered.
echo "again=$("$vt/tokenbridge" enroll --device "$iface" 2>&1)"
echo "regs_again=$(regs)"
key=$(python3 -c "import json,sys; print(list(json.load(open(sys.argv[1])))[0])" "$XDG_DATA_HOME/tokenbridge/enrollment.json")
echo "forget=$("$vt/tokenbridge" enroll --reset "$key" 2>&1)"
# prefer piv: the CCID side enrolls (PIV PIN 123456), as a second account.
printf '{"enroll": {"server": "%s", "onInsert": "auto", "prefer": "piv", "username": "bob"}}\n' "$url" >"$XDG_CONFIG_HOME/tokenbridge/config.json"
printf '123456\n' >"$w/pins"
"$vt/tokenbridge" enroll --device "$hid" --pin-fd 3 3<"$w/pins" >"$w/c.out" 2>&1; echo "piv_rc=$?"
echo "piv_out=$(tr '\n' ' ' <"$w/c.out")"
echo "regs_piv=$(regs)"
