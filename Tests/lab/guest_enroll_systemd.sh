#!/bin/bash
# Runs inside a lab guest booted with --systemd (Tests/lab/test_enroll_systemd.py): the whole plug-in path, with no
# command typed for an enrollment. The rules and the user unit are installed (Tools/install-udev); root's user
# manager is told the pinentry to use (Tests/lab/guest_enroll_pinentry.sh, a scripted one: the PINs come
# from it, as a user would type them); composite tokens are attached over USB/IP: udev → SYSTEMD_USER_WANTS →
# tokenbridge-enroll@.service → tokenbridge enroll. Phases: A plugged (enrolled), A replugged (nothing asked),
# B plugged and pulled while its enrollment waits in pinentry (nothing written), B plugged again (enrolled),
# onInsert ask (A declined, remembered, --reset forgets), no configuration (nothing done), prefer piv by hand.
# Prints KEY=VALUE lines; the test asserts on them.
set -u
vt="${TB_BIN:-$LAB_ROOT/.build/debug}"
tb="$vt/tokenbridge"
w=$(mktemp -d /tmp/plug.XXXXXX)
chmod 755 "$w"
# root's user bus and runtime directory, for dbus-monitor and busctl.
export XDG_RUNTIME_DIR=/run/user/0 DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/0/bus
data=/root/.local/share/tokenbridge
# A guest the other --systemd modules ran in before (Tools/test's LAB_SYSTEMD_GUEST): their local data and
# configuration go, and the journal is read from here on (guest_enroll_common.sh).
rm -rf "$data" /root/.config/tokenbridge
journal_since="@$(date +%s)"
# The reference RP first: its Python start (cryptography's import) takes seconds under TCG, and the rest of the
# setup runs meanwhile.
python3 "$LAB_ROOT/Tools/rp/tokenbridge_rp.py" --port 0 --port-file "$w/rp.port" 2>"$w/rp.log" &
rp=$!
mkdir -p "$w/a" "$w/b"
"$vt/virtual-token" usbip --listen 127.0.0.1:3260 --device composite --state-dir "$w/a" >"$w/a.log" 2>&1 &
srv_a=$!
"$vt/virtual-token" usbip --listen 127.0.0.1:3261 --device composite --serial 30000001 --state-dir "$w/b" \
  >"$w/b.log" 2>&1 &
srv_b=$!
# The notifications the units send (org.freedesktop.Notifications.Notify on root's session bus).
dbus-monitor --session "interface='org.freedesktop.Notifications',member='Notify'" >"$w/notify.log" 2>&1 &
mon=$!
trap 'for p in $(usbip port 2>/dev/null | sed -n "s/^Port \([0-9]*\):.*/\1/p"); do usbip detach -p $p >/dev/null 2>&1; done
  kill $srv_a $srv_b $rp $mon 2>/dev/null' EXIT
# Installs the rules and the unit, and reloads udev and root's user manager (over the bus exported above).
"$LAB_ROOT/Tools/install-udev" --bin "$tb" >"$w/install.log" 2>&1 || { cat "$w/install.log"; exit 90; }
echo "user_manager_reloaded=$(grep -c '^reloaded the user service manager' "$w/install.log")"
sc="$w/scenario.json"
scenario() { printf '{"answers": %s}\n' "$1" >"$sc"; rm -f "$sc.pos"; }
# As an administrator would: through a PAM session of root (`-M root@`). Root lingers in the lab: its user manager
# outlives the session (without linger, logind stops user@0.service 10 s after the session closes: SIGTERM).
# (Without XDG_RUNTIME_DIR and the bus address: with them, systemctl would skip the session and use the bus.)
env -u XDG_RUNTIME_DIR -u DBUS_SESSION_BUS_ADDRESS systemctl --user -M root@ set-environment \
  PINENTRY_PROGRAM="$LAB_ROOT/Tests/lab/guest_enroll_pinentry.sh" SCRIPTED_PINENTRY_SCENARIO="$sc" PATH="$PATH"
for _ in $(seq 300); do [ -s "$w/rp.port" ] && break; sleep 0.2; done
url="http://127.0.0.1:$(cat "$w/rp.port")"
mkdir -p /root/.config/tokenbridge
printf '{"enroll": {"server": "%s", "onInsert": "auto"}}\n' "$url" >/root/.config/tokenbridge/config.json

. "$LAB_ROOT/Tests/lab/guest_enroll_common.sh"
fresh_pcscd
port_of() { usbip port 2>/dev/null | awk -v s="127.0.0.1:$1/" '/^Port/{p=$2} index($0, s){sub(":", "", p); print p}'; }
attach() {  # attach PORT: the server's device 1-1
  for _ in $(seq 100); do usbip --tcp-port "$1" list -r 127.0.0.1 >/dev/null 2>&1 && break; sleep 0.2; done
  usbip --tcp-port "$1" attach -r 127.0.0.1 -b 1-1 >/dev/null 2>&1 || { echo "attach_failed=$1"; exit 91; }
}
detach() {  # detach PORT, and wait until its hidraw node is gone
  local p n; p=$(port_of "$1"); n=$(ls /sys/class/hidraw | wc -l)
  usbip detach -p "$p" >/dev/null 2>&1
  for _ in $(seq 100); do [ "$(ls /sys/class/hidraw | wc -l)" -lt "$n" ] && break; sleep 0.1; done
}
uptime_now() { cut -d' ' -f1 /proc/uptime; }

# A: plugged in, nothing typed: one enrollment (FIDO2, prefer's default): a first PIN, then the registration.
scenario '["1234", "1234"]'
t0=$(uptime_now)
attach 3260
wait_ended 2
# insert→enrolled: from the attach to the "Enrolled" line, both on the guest's monotonic clock.
t1=$(journalctl --no-pager -o short-monotonic --since "$journal_since" | grep -m1 ' Enrolled fido2-' | sed 's/^\[ *\([0-9.]*\)\].*/\1/')
echo "insert_to_enrolled=$(python3 -c "print(round($t1 - $t0, 1))" 2>/dev/null)"
echo "a_regs=$(regs)"
echo "a_enrolled=$(journal | grep -c '^Enrolled ')"
echo "a_enrolled_line=$(journal | grep -m1 '^Enrolled ')"
echo "a_failed=$(journal | grep -c '^Failed to start tokenbridge-enroll@')"
echo "a_getpins=$(getpins)"
echo "a_memory=$(memory)"
echo "a_rows=$(rows)"
echo "a_tokens=$("$tb" tokens --json 2>&1 | tr -d '\n')"
echo "a_readers=$(pcsc_scan -r 2>&1 | tr '\n' '|')"
echo "sigterm=$(journal | grep -c 'status=15/TERM')"

# A unplugged and plugged in again: nothing asked, nothing registered.
n=$(ended)
detach 3260
attach 3260
wait_ended $((n + 2))
echo "replug_remembered=$(journal | grep -c 'usb-1209-0001-20000001 was enrolled before')"
echo "replug_getpins=$(getpins)"
echo "replug_regs=$(regs)"

# B (another token): its enrollment waits in pinentry for the registration's PIN (pinentry run 4: runs 1-2 were
# A's, run 3 is B's new PIN) and B is pulled meanwhile; then the PIN is given.
scenario '["5678", "5678"]'
: >"$sc.hold-4"
n=$(ended)
attach 3261
for _ in $(seq 300); do [ -e "$sc.held-4" ] && break; sleep 0.2; done
echo "b_held=$([ -e "$sc.held-4" ] && echo yes || echo no)"
detach 3261
rm -f "$sc.hold-4"
wait_ended $((n + 2))
echo "b_pulled_error=$(journal | grep '^tokenbridge: ' | tail -1)"
echo "b_pulled_status=$(journal | sed -n 's/^tokenbridge-enroll@.*: Main process exited, code=exited, status=\([0-9]*\).*/\1/p' | tail -1)"
echo "b_pulled_failed=$(journal | grep -c '^Failed to start tokenbridge-enroll@')"
echo "b_pulled_regs=$(regs)"
echo "b_pulled_memory=$(memory)"
echo "b_pulled_rows=$(rows)"
# B plugged in again: the enrollment completes (its PIN was set before the pull: only the registration's PIN).
scenario '["5678"]'
g=$(getpins)
n=$(ended)
attach 3261
wait_ended $((n + 2))
echo "b_regs=$(regs)"
echo "b_enrolled_line=$(journal | grep '^Enrolled ' | tail -1)"
echo "b_getpins=$(($(getpins) - g))"
echo "b_memory=$(memory)"
echo "b_rows=$(rows)"

# onInsert ask: A forgotten, then plugged again: the question (CONFIRM) is answered no → declined, remembered.
printf '{"enroll": {"server": "%s", "onInsert": "ask"}}\n' "$url" >/root/.config/tokenbridge/config.json
echo "reset=$("$tb" enroll --reset usb-1209-0001-20000001 2>&1)"
scenario '["@cancel", "@cancel"]'
c0=$(grep -c '^CONFIRM' "$sc.log")
n=$(ended)
detach 3260
attach 3260
wait_ended $((n + 2))
echo "ask_confirms=$(($(grep -c '^CONFIRM' "$sc.log") - c0))"
echo "ask_declined=$(journal | grep -c '^Not enrolled; usb-1209-0001-20000001 will not be asked again')"
echo "ask_memory=$(memory)"
echo "ask_regs=$(regs)"
n=$(ended)
detach 3260
attach 3260
wait_ended $((n + 2))
echo "ask_again_confirms=$(($(grep -c '^CONFIRM' "$sc.log") - c0))"
echo "ask_again_remembered=$(journal | grep -c 'usb-1209-0001-20000001 was declined before')"
echo "forget=$("$tb" enroll --reset usb-1209-0001-20000001 2>&1)"
echo "forget_memory=$(memory)"

snap

echo "root_sessions_closed=$(journal | grep -c 'session closed for user root')"
echo "user_manager=$(systemctl show user@0.service -p ActiveState --value)"
echo "user_manager_stopped=$(journal | grep -c '^Stopping user@0.service')"
echo "units_failed_total=$(journal | grep -c '^Failed to start tokenbridge-enroll@')"
echo "sigterm_total=$(journal | grep -c 'status=15/TERM')"
echo "notify_enrolled=$(grep -c 'string "Token enrolled"' "$w/notify.log")"
echo "notify_not_enrolled=$(grep -c 'string "Token not enrolled"' "$w/notify.log")"
echo "notify_bodies=$(grep -A1 'string "Token' "$w/notify.log" | grep -v 'string "Token' | sed 's/^ *string //' | tr '\n' '|')"

# Without "enroll" in the configuration, enroll does nothing and records nothing (A is attached, forgotten).
a_usb=$(readlink -f "$(dirname "$(grep -lx 20000001 /sys/bus/usb/devices/*/serial)")")
a_hid=$(basename "$(ls -d "$a_usb"/*/*/hidraw/hidraw* | head -1)")
mkdir -p "$w/noconfig"
echo "unconfigured=$(XDG_CONFIG_HOME="$w/noconfig" "$tb" enroll --device "$a_hid" 2>&1)"
echo "unconfigured_memory=$(memory)"
# prefer piv, typed by hand at A's hidraw node: the CCID side of the same token enrolls (PIV PIN 123456), as bob.
printf '{"enroll": {"server": "%s", "onInsert": "auto", "prefer": "piv", "username": "bob"}}\n' "$url" \
  >/root/.config/tokenbridge/config.json
printf '123456\n' >"$w/pins"
"$tb" enroll --device "$a_hid" --pin-fd 3 3<"$w/pins" >"$w/piv.out" 2>&1
echo "piv_rc=$?"
echo "piv_out=$(tr '\n' ' ' <"$w/piv.out")"
echo "piv_regs=$(regs)"
echo "piv_memory=$(memory)"
# What pcscd logged meanwhile (its errors go to the journal: a reader it failed to add, a driver error), for the
# assertions' messages: a reader missing for a plugged-in CCID interface is said with pcscd's own words.
echo "pcscd_log=$(journalctl --no-pager -o cat -t pcscd --since "$journal_since" | tail -20 | tr '\n' '|')"

echo "done=1"
