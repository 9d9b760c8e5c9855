#!/bin/bash
# Runs inside a lab guest booted with --systemd (Tests/lab/test_dbus_service.py): tokenbridge serve on root's real
# session bus (unix:path=/run/user/0/bus), started by D-Bus activation through its user unit. A virtual composite
# token (PIV + FIDO2 on one USB device) is attached over USB/IP; the reference RP runs on loopback; PINs come from a
# scripted pinentry (Tests/lab/guest_enroll_pinentry.sh) named in root's configuration. This script does the setup
# and the activation check with busctl; Tests/lab/guest_dbus_service.py (a jeepney client) does the flows. Prints
# KEY=VALUE lines; the test asserts on them.
set -u
vt="${TB_BIN:-$LAB_ROOT/.build/debug}"
tb="$vt/tokenbridge"
w=$(mktemp -d /tmp/dbus.XXXXXX)
chmod 755 "$w"
export XDG_RUNTIME_DIR=/run/user/0 DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/0/bus
# Local data of earlier runs in this guest (a reused guest) would name tokens that are gone; the journal is read
# from here on.
rm -rf /root/.local/share/tokenbridge
journal_since="@$(date +%s)"
NAME=org.tokenbridge.TokenBridge1
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }'; }
OPATH=/org/tokenbridge/TokenBridge1
UNIT=tokenbridge-serve.service
# The Python client's facet: /proc/PID/exe of the interpreter is the real path (pyenv's python3 is a symlink).
py=$(readlink -f "$(command -v python3)")
busctl_exe=$(readlink -f "$(command -v busctl)")
echo "py_facet=unix:exe:$py"
echo "busctl_facet=unix:exe:$busctl_exe"
# The RPs first: their Python start (cryptography's import) takes seconds under TCG; the rest of the setup runs
# meanwhile. rp trusts the clients' executables; flat trusts only the Flatpak app the pretender claims to be.
python3 "$LAB_ROOT/Tools/rp/tokenbridge_rp.py" --port 0 --port-file "$w/rp.port" \
  --facet "unix:exe:$py" --facet "unix:exe:$busctl_exe" 2>"$w/rp.log" &
rp=$!
python3 "$LAB_ROOT/Tools/rp/tokenbridge_rp.py" --port 0 --port-file "$w/flat.port" \
  --facet "flatpak:app-id:org.example.App" 2>"$w/flat.log" &
flat=$!
mkdir -p "$w/a"
"$vt/virtual-token" usbip --listen 127.0.0.1:3260 --device composite --state-dir "$w/a" >"$w/a.log" 2>&1 &
srv=$!
trap 'for p in $(usbip port 2>/dev/null | sed -n "s/^Port \([0-9]*\):.*/\1/p"); do usbip detach -p $p >/dev/null 2>&1; done
  systemctl --user stop '$UNIT' 2>/dev/null; kill $srv $rp $flat 2>/dev/null' EXIT

# Not there before: no owner of the name, the unit inactive.
echo "before_owner=$(busctl --user status "$NAME" >/dev/null 2>&1 && echo yes || echo no)"
echo "before_active=$(systemctl --user is-active "$UNIT" 2>&1)"

# The activation files, as an administrator installs them from a checkout (this build's binary): Tools/install-udev
# (/usr/local/share/dbus-1/services, /etc/systemd/user), as docs/dbus-api.md says.
"$LAB_ROOT/Tools/install-udev" --bin "$tb" >"$w/install.log" 2>&1 || { cat "$w/install.log"; exit 90; }
dbus_file=/usr/local/share/dbus-1/services/$NAME.service unit_file=/etc/systemd/user/$UNIT
echo "install_log=$(grep -v '/share/\(man\|bash-completion\|zsh\|fish\)/' "$w/install.log" | tr '\n' '|')"
echo "dbus_file=$(grep -v '^#' "$dbus_file" 2>&1 | tr '\n' '|')"
echo "unit_file=$(grep -v '^#' "$unit_file" 2>&1 | tr '\n' '|')"
unit_dir=$(dirname "$unit_file")
rm -rf "$unit_dir/$UNIT.d"  # the idle drop-in of an earlier run in a reused guest
# The user manager and the bus see them (the bus's service directory may not have existed when it started).
env -u XDG_RUNTIME_DIR -u DBUS_SESSION_BUS_ADDRESS systemctl --user -M root@ daemon-reload
busctl --user call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig >/dev/null
echo "activatable=$(busctl --user call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus \
  ListActivatableNames | grep -c "\"$NAME\"")"

# The pinentry: named in the configuration; its scenario file through the user manager's environment (the unit
# is started by it). Configuration also names the RP (not used by the service: the client brings the request).
sc="$w/scenario.json"
printf '{"answers": []}\n' >"$sc"
env -u XDG_RUNTIME_DIR -u DBUS_SESSION_BUS_ADDRESS systemctl --user -M root@ set-environment \
  SCRIPTED_PINENTRY_SCENARIO="$sc" PATH="$PATH"
for _ in $(seq 300); do [ -s "$w/rp.port" ] && [ -s "$w/flat.port" ] && break; sleep 0.2; done
url="http://127.0.0.1:$(cat "$w/rp.port")"
flat_url="http://127.0.0.1:$(cat "$w/flat.port")"
mkdir -p /root/.config/tokenbridge
printf '{"server": "%s", "pinentry": "%s", "prompt": "pinentry", "interactionTimeout": 60}\n' "$url" \
  "$LAB_ROOT/Tests/lab/guest_enroll_pinentry.sh" >/root/.config/tokenbridge/config.json

# The token, attached; the FIDO2 side gets its PIN (a new virtual key has none).
for _ in $(seq 100); do usbip --tcp-port 3260 list -r 127.0.0.1 >/dev/null 2>&1 && break; sleep 0.2; done
usbip --tcp-port 3260 attach -r 127.0.0.1 -b 1-1 >/dev/null 2>&1 || { echo "attach_failed=1"; exit 91; }
for _ in $(seq 150); do
  "$tb" tokens --json 2>/dev/null | grep -q '"fido2-' && "$tb" tokens --json 2>/dev/null | grep -q '"piv-' && break
  sleep 0.2
done
"$tb" tokens --json >"$w/tokens.json" 2>&1
echo "tokens=$(tr -d '\n' <"$w/tokens.json")"
printf '654321\n' >"$w/fpin"
"$tb" pin set --token fido2-hidraw0 --pin-fd 3 3<"$w/fpin" >"$w/pinset.log" 2>&1
echo "fido2_pin_set=$? $(tr '\n' ' ' <"$w/pinset.log")"
rm -f "$w/fpin"

# Still not running (nothing called it); the first call starts it by activation: busctl's Discover.
echo "before_call_active=$(systemctl --user is-active "$UNIT" 2>&1)"
t=$EPOCHREALTIME
busctl --user --json=short call "$NAME" "$OPATH" "$NAME" Discover >"$w/discover.json" 2>"$w/discover.err"
echo "busctl_discover_rc=$?"
echo "busctl_discover_s=$(since "$t")"
echo "busctl_discover=$(tr -d '\n' <"$w/discover.json")"
echo "busctl_discover_err=$(tr '\n' ' ' <"$w/discover.err")"
echo "after_call_active=$(systemctl --user is-active "$UNIT" 2>&1)"
echo "busctl_status=$(busctl --user status "$NAME" 2>&1 | grep -E '^(PID|Exe|Unit|UserUnit)=' | tr '\n' ' ')"
echo "main_pid=$(systemctl --user show -p MainPID --value "$UNIT")"

# The flows, with a Python (jeepney) client.
python3 "$LAB_ROOT/Tests/lab/guest_dbus_service.py" "$w" "$url" "$flat_url" "$tb" "$busctl_exe"
echo "client_rc=$?"

# Idle exit: a drop-in gives the unit a short --idle-timeout (the service reads it only from its command line);
# stopped, activated again by a call, it exits by itself and the unit is inactive.
mkdir -p "$unit_dir/$UNIT.d"
# (10 s: with 3 the service had idled out before the next line asked whether it ran, in a loaded TCG guest.)
printf '[Service]\nExecStart=\nExecStart="%s" serve --idle-timeout 10\n' "$tb" >"$unit_dir/$UNIT.d/idle.conf"
systemctl --user daemon-reload
systemctl --user stop "$UNIT"
echo "idle_stopped=$(systemctl --user is-active "$UNIT" 2>&1)"
busctl --user call "$NAME" "$OPATH" "$NAME" ListTokens 'a{sv}' 0 >"$w/list.out" 2>&1
rc=$?
t=$EPOCHREALTIME  # the last call answered: the idle time counts from here
echo "idle_call_rc=$rc $(head -c 200 "$w/list.out" | tr '\n' ' ')"
echo "idle_active=$(systemctl --user is-active "$UNIT" 2>&1)"
echo "idle_cmdline=$(tr '\0' ' ' <"/proc/$(systemctl --user show -p MainPID --value "$UNIT")/cmdline" 2>/dev/null)"
for _ in $(seq 600); do
  [ "$(systemctl --user is-active "$UNIT" 2>&1)" = inactive ] && break
  sleep 0.1
done
echo "idle_exit_s=$(since "$t")"
echo "idle_after=$(systemctl --user is-active "$UNIT" 2>&1)"
echo "idle_owner=$(busctl --user status "$NAME" >/dev/null 2>&1 && echo yes || echo no)"
echo "idle_result=$(systemctl --user show -p Result --value "$UNIT") $(systemctl --user show -p ExecMainStatus --value "$UNIT")"
echo "journal_errors=$(journalctl --no-pager -o cat --since "$journal_since" --user-unit "$UNIT" 2>/dev/null | grep -ci 'error\|fail')"
journalctl --no-pager -o cat --since "$journal_since" --user-unit "$UNIT" 2>/dev/null | tail -20 | sed 's/^/journal: /'
echo "done=1"
