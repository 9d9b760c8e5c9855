#!/bin/bash
# Runs inside the lab guest with a composite token attached (not collected by pytest): tokenbridge doctor on a
# healthy setup, then with each failure it claims to detect induced for real. Prints one block per case:
# "== CASE rc=N" followed by doctor's output.
set -u
tb="${TB_BIN:-$LAB_ROOT/.build/debug}/tokenbridge"
w=$(mktemp -d /tmp/doctor.XXXXXX); chmod 755 "$w"
export HOME=$w/home XDG_CONFIG_HOME=$w/home/.config XDG_DATA_HOME=$w/home/.local/share
mkdir -p "$HOME"
run() { echo "== $1 rc=$(cd / && "${@:2}" >"$w/out" 2>&1; echo $?)"; cat "$w/out"; }
for _ in $(seq 50); do pcsc_scan -r 2>/dev/null | grep -q '^0:' && break; sleep 0.2; done
run healthy "$tb" doctor
# Another user, on no seat: the hidraw node (0600 root, no ACL) is not theirs.
mkdir -p "$w/nobody" && chown 65534:65534 "$w/nobody"
run other-user setpriv --reuid=65534 --regid=65534 --clear-groups env HOME="$w/nobody" XDG_CONFIG_HOME="$w/nobody/c" \
  XDG_DATA_HOME="$w/nobody/d" "$tb" doctor
# A program holding the card exclusively (what scdaemon does).
python3 - "$(pcsc_scan -r | sed -n 's/^0: //p')" >"$w/hold.log" 2>&1 <<'PY' &
import ctypes, sys, time
ctypes.CDLL(None).prctl(15, b"scdaemon", 0, 0, 0)  # PR_SET_NAME: /proc/PID/comm says scdaemon, as gpg's would
lib = ctypes.CDLL("libpcsclite.so.1")
ctx = ctypes.c_long(); card = ctypes.c_long(); proto = ctypes.c_ulong()
assert lib.SCardEstablishContext(2, None, None, ctypes.byref(ctx)) == 0
# The card may not be powered yet in a slow guest (SCARD_E_NO_SMARTCARD) or be in another process's hands for a
# moment (SCARD_E_SHARING_VIOLATION): try for up to 30 s, and say what the last try answered.
for _ in range(150):
    rv = lib.SCardConnect(ctx, sys.argv[1].encode(), 1, 3, ctypes.byref(card), ctypes.byref(proto)) & 0xffffffff  # 1 = EXCLUSIVE
    if rv == 0:
        break
    time.sleep(0.2)
print("held" if rv == 0 else "connect failed %x" % rv, flush=True)
time.sleep(60)
PY
holder=$!
for _ in $(seq 200); do grep -q . "$w/hold.log" && break; sleep 0.2; done
echo "holder-pid=$holder holder: $(cat "$w/hold.log")"
run card-held "$tb" doctor
kill $holder
# udev did not mark the key (as without systemd's 60-fido-id.rules and ours): its udev database entry gone.
db=/run/udev/data/c$(cat /sys/class/hidraw/hidraw0/dev)
mv "$db" "$w/udev-db"
run unmarked "$tb" doctor
mv "$w/udev-db" "$db"
# A node libfido2 cannot use as a FIDO key (a stale /dev: the name leads to another device, here /dev/null's).
mv /dev/hidraw0 /dev/.hidraw0.real && mknod -m 0666 /dev/hidraw0 c 1 3
run unlisted "$tb" doctor
rm /dev/hidraw0 && mv /dev/.hidraw0.real /dev/hidraw0
# Our rules older than this tokenbridge (an earlier version still installed).
cp /etc/udev/rules.d/70-tokenbridge.rules "$w/rules.bak"
sed -i 's/^# tokenbridge-rules-version: .*/# tokenbridge-rules-version: 1/' /etc/udev/rules.d/70-tokenbridge.rules
run old-rules "$tb" doctor
cp "$w/rules.bak" /etc/udev/rules.d/70-tokenbridge.rules
# Our rules gone.
mv /etc/udev/rules.d/70-tokenbridge.rules "$w/"
run no-rules "$tb" doctor
mv "$w/70-tokenbridge.rules" /etc/udev/rules.d/
# pcscd stopped.
pid=$(pidof pcscd)
kill $pid; for _ in $(seq 50); do kill -0 $pid 2>/dev/null || break; sleep 0.2; done
run no-pcscd "$tb" doctor
pcscd >/dev/null 2>&1
