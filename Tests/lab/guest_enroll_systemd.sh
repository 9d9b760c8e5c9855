#!/bin/bash
# Runs inside a lab guest booted with --systemd (not collected by pytest): the whole plug-in path. The rules and
# the user unit are installed (Tools/install-udev), root's user manager is told the pinentry to use (a scripted
# one: the PINs come from it, as a user would type them), and a composite token is attached with no command
# typed: udev → SYSTEMD_USER_WANTS → tokenbridge-enroll@.service → tokenbridge enroll. Prints KEY=VALUE lines.
set -u
vt="${TB_BIN:-$LAB_ROOT/.build/debug}"
w=$(mktemp -d /tmp/plug.XXXXXX)
chmod 755 "$w"
user=(systemctl --user -M root@)
"$LAB_ROOT/Tools/install-udev" --bin "$vt/tokenbridge" >"$w/install.log" 2>&1 || { cat "$w/install.log"; exit 90; }
udevadm control --reload
python3 "$LAB_ROOT/Tools/rp/tokenbridge_rp.py" --port 0 --port-file "$w/rp.port" 2>"$w/rp.log" &
rp=$!
"$vt/virtual-token" usbip --listen 127.0.0.1:3260 --device composite --state-dir "$w" >"$w/server.log" 2>&1 &
srv=$!
trap 'usbip detach -p 0 >/dev/null 2>&1; kill $srv $rp' EXIT
for _ in $(seq 150); do [ -s "$w/rp.port" ] && break; sleep 0.2; done
url="http://127.0.0.1:$(cat "$w/rp.port")"
regs() { python3 -c "import urllib.request,sys,json; print(json.dumps([r['aaid'] for r in json.load(urllib.request.urlopen(sys.argv[1]))]))" "$url/_admin/registrations"; }
mkdir -p /root/.config/tokenbridge
printf '{"enroll": {"server": "%s", "onInsert": "auto"}}\n' "$url" >/root/.config/tokenbridge/config.json
# The new PIN (set, then its repetition is answered by the same GETPIN with SETREPEAT), then the PIN to register.
printf '{"answers": ["1234", "1234", "1234"]}\n' >"$w/scenario.json"
"${user[@]}" set-environment PINENTRY_PROGRAM="$LAB_ROOT/Tests/cli/scripted_pinentry.py" \
  SCRIPTED_PINENTRY_SCENARIO="$w/scenario.json" PATH="$PATH"
"${user[@]}" daemon-reload
attach() {
  for _ in $(seq 100); do usbip --tcp-port 3260 list -r 127.0.0.1 >/dev/null 2>&1 && break; sleep 0.2; done
  usbip --tcp-port 3260 attach -r 127.0.0.1 -b 1-1 >/dev/null || exit 91
}
t0=$(date +%s.%N)
attach
for _ in $(seq 300); do [ "$(regs)" != "[]" ] && break; sleep 0.5; done
t1=$(date +%s.%N)
sleep 3   # let the second event's unit finish too
echo "regs=$(regs)"
echo "insert_to_enrolled=$(python3 -c "print(round($t1 - $t0, 1))")"
echo "units=$("${user[@]}" list-units --all --no-legend 'tokenbridge-enroll@*' | awk '{print $1}' | sort | tr '\n' ' ')"
echo "failed_units=$("${user[@]}" list-units --failed --no-legend 'tokenbridge-enroll@*' | wc -l)"
journalctl --no-pager -o cat >"$w/journal1"
echo "enrolled_lines=$(grep -c '^Enrolled ' "$w/journal1")"
echo "memory=$(tr -d ' \n' </root/.local/share/tokenbridge/enrollment.json)"
# Unplug and plug again: nothing is asked, nothing registered.
usbip detach -p 0 >/dev/null
for _ in $(seq 50); do [ -e /dev/hidraw0 ] || break; sleep 0.2; done
attach
for _ in $(seq 60); do
  n=$(journalctl --no-pager -o cat | grep -c 'was enrolled before')
  [ "$n" -ge 1 ] && break; sleep 0.5
done
sleep 2
echo "replug_remembered=$(journalctl --no-pager -o cat | grep -c 'was enrolled before')"
echo "regs_after_replug=$(regs)"
echo "pinentry_getpins=$(grep -c '^GETPIN' "$w/scenario.json.log" 2>/dev/null)"
