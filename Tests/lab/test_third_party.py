"""A FIDO2 key we did not simulate, as a USB key in the guest's kernel: `virtual-token usbip --device fido-external`
fronts an external key's socket (one datagram = one 64-byte CTAPHID report) with a FIDO HID interface, so every
report the guest's kernel carries goes to that firmware and back. The key runs inside the guest (it has no network):
third-party firmware through `Tools/third-party fido2 NAME` (solo1, canokey: built on the host with
`Tools/third-party build NAME`, skipped with the reason when that tool is not in the tree), and our own virtual key
(`virtual-token fido2 --socket`), which proves the forwarding itself. Per implementation, one key and one USB device
held for the module: the kernel's hidraw node, libfido2's enumeration (fido2-token -L/-I), systemd's fido_id tags
and our udev rule, tokenbridge's flows (tokens, pin set/status, register, authenticate, deregister against the
reference RP in the guest), and a replug of the key seen as a USB unplug."""
import base64
import json
import shlex
import subprocess

import pytest

from conftest import RESIDENT, ROOT, _usbip_unavailable, release

THIRD_PARTY = ROOT / "Tools" / "third-party"
PORT = 3285  # a held server's port (3270-3289): no job's cleanup detaches it
WORK = f"/tmp/third-party-{PORT}"
SOCK = f"{WORK}/key.sock"
USB_SERIAL = "41000001"
# What each key says of itself in getInfo (fido2-token -I): its versions and its AAGUID, which only that firmware
# has (ours: the random one in the external key's state file, so the answer came from that process).
EXPECTED = {
    "virtual": {"versions": "FIDO_2_0, FIDO_2_1_PRE, FIDO_2_1", "aaguid": None},
    "solo1": {"versions": "U2F_V2, FIDO_2_0, FIDO_2_1_PRE", "aaguid": "0076631bd4a0427f57730ec71c9e0279"},
    "canokey": {"versions": "U2F_V2, FIDO_2_0, FIDO_2_1", "aaguid": "244eb29ee0904e4981fe1f20f8d3b8f4"},
}


def _key_command(name):
    if name == "virtual":
        vt = '"${TB_BIN:-$LAB_ROOT/.build/debug}/virtual-token"'
        return f"{vt} fido2 --socket {SOCK} --state {WORK}/state/key.json"
    return f"{shlex.quote(str(THIRD_PARTY))} fido2 {name} --socket {SOCK} --state {WORK}/state"


def _up(name):
    """Starts the key and the USB/IP server in front of it (both detached from the job), attaches the device."""
    return f"""set -u
vt="${{TB_BIN:-$LAB_ROOT/.build/debug}}/virtual-token"; d={WORK}; rm -rf $d; mkdir -p $d/state
setsid {_key_command(name)} >$d/key.log 2>&1 </dev/null & echo $! >$d/key.pid
for _ in $(seq 1800); do [ -S {SOCK} ] && break; sleep 0.1; done
[ -S {SOCK} ] || {{ echo "the key's socket did not appear"; cat $d/key.log; exit 1; }}
setsid "$vt" usbip --listen 127.0.0.1:{PORT} --device fido-external --fido-socket {SOCK} --serial {USB_SERIAL} \\
  --state-dir $d >$d/server.log 2>&1 </dev/null & echo $! >$d/server.pid
for _ in $(seq 100); do usbip --tcp-port {PORT} list -r 127.0.0.1 >/dev/null 2>&1 && break; sleep 0.1; done
{_ATTACH}
"""


_ATTACH = f"""usbip --tcp-port {PORT} attach -r 127.0.0.1 -b 1-1 || {{ cat {WORK}/server.log {WORK}/key.log; exit 1; }}
for _ in $(seq 100); do [ -n "$(ls /sys/class/hidraw)" ] && break; sleep 0.1; done
[ -n "$(ls /sys/class/hidraw)" ] || {{ echo "no hidraw node"; cat {WORK}/server.log; exit 1; }}
udevadm settle -t 10"""

_DETACH = f"""for p in $(usbip port 2>/dev/null | awk '/^Port/{{p=$2}} /127.0.0.1:{PORT}\\//{{sub(":", "", p); print p}}'); do
  usbip detach -p $p; done"""

_DOWN = f"""set -u
{_DETACH}
for f in server key; do [ -f {WORK}/$f.pid ] && kill "$(cat {WORK}/$f.pid)" 2>/dev/null; done
for _ in $(seq 100); do [ -z "$(ls /sys/class/hidraw)" ] && break; sleep 0.1; done
udevadm settle -t 10
"""

NODE = 'n=$(fido2-token -L | cut -d: -f1 | head -1); '


@pytest.fixture(scope="module", params=["virtual", "solo1", "canokey"])
def key(request, guest):
    name = request.param
    if RESIDENT:
        pytest.skip("attaches its own USB device in front of the key (the only FIDO device in the guest): not run "
                    "with a resident token")
    reason = _usbip_unavailable()
    if reason:
        pytest.skip(reason)
    if name != "virtual":
        if not THIRD_PARTY.exists():
            pytest.skip(f"{name}: Tools/third-party is not in this tree (it builds and runs the third-party firmware)")
        b = subprocess.run([str(THIRD_PARTY), "build", name], capture_output=True, text=True, timeout=900)
        assert b.returncode == 0, f"Tools/third-party build {name} failed: {b.stdout[-2000:]}{b.stderr[-2000:]}"
    release(guest)  # a module's held virtual device goes first: this key is then the guest's only FIDO device
    r = guest.sh(_up(name), timeout=180)
    if r.returncode != 0:
        guest.sh(_DOWN, timeout=120)
        pytest.fail(f"the {name} key did not come up as a USB device: {r.stdout[-3000:]}{r.stderr[-1000:]}")
    yield name
    guest.sh(_DOWN, timeout=120)


def test_libfido2_lists_it_through_the_kernel(key, guest):
    r = guest.sh(NODE + 'fido2-token -L && fido2-token -I "$n"')
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("/dev/hidraw0: vendor=0x1209, product=0x0001 (TokenBridge External FIDO2 Key)"), r.stdout
    assert f"version strings: {EXPECTED[key]['versions']}\n" in r.stdout, r.stdout
    aaguid = EXPECTED[key]["aaguid"]
    if key == "virtual":
        state = guest.run("cat", f"{WORK}/state/key.json")
        assert state.returncode == 0, state.stdout
        aaguid = base64.b64decode(json.loads(state.stdout)["aaguid"]).hex()
    assert aaguid and f"aaguid: {aaguid}\n" in r.stdout, r.stdout


def test_udev_tags_it_and_applies_our_rule(key, guest):
    r = guest.sh(NODE + 'udevadm info -q property -n "$n"; udevadm info -q all -n "$n" | grep -i tags; '
                 'udevadm info -a -n "$n" | grep -F "ATTRS{serial}"')
    assert r.returncode == 0, r.stdout
    lines = r.stdout.splitlines()
    assert "ID_FIDO_TOKEN=1" in lines and "ID_SECURITY_TOKEN=1" in lines  # systemd's fido_id
    assert "TOKENBRIDGE_TOKEN=fido2" in lines  # set only by udev/70-tokenbridge.rules
    assert "SYSTEMD_USER_WANTS=tokenbridge-enroll@hidraw0.service" in lines  # the plug-in enrollment's start
    assert ":uaccess:" in r.stdout and ":systemd:" in r.stdout
    assert f'ATTRS{{serial}}=="{USB_SERIAL}"' in r.stdout  # the USB device in front of the key


def test_tokenbridge_registers_and_authenticates_through_it(key, guest):
    """Tests/lab/guest_flows.py: tokens, pin set, pin status, register, authenticate, deregister over hidraw."""
    r = guest.run("python3", str(ROOT / "Tests" / "lab" / "guest_flows.py"), "fido", timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-1000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    steps = {s["cmd"].split(" --")[0]: s for s in result["steps"]}
    failed = [f"{s['cmd']}: exit {s['rc']}: {s['stderr'].strip()}" for s in result["steps"] if s["rc"] != 0]
    assert not failed, "\n".join(failed)
    listed = json.loads(steps["tokens"]["stdout"])
    assert [(t["kind"], t["id"]) for t in listed] == [("fido2", "fido2-hidraw0")], listed
    assert json.loads(steps["pin status"]["stdout"])["pin"]["retriesLeft"] == 8
    assert [r["aaid"] for r in result["registrations"]] == ["7B1D#0002"]
    assert result["registrations"][0]["counter"] >= 1
    assert result["after"] == []


def test_a_replug_of_the_key_unplugs_the_usb_device(key, guest):
    """SIGUSR1 replugs the key (its socket is made anew): the connection drops, so the guest sees the USB device go;
    the next attach connects to the new socket and the key answers again (with the PIN the flow set)."""
    r = guest.sh(f"""set -u
ino=$(stat -c %i {SOCK})
kill -USR1 "$(cat {WORK}/key.pid)"
for _ in $(seq 100); do [ -z "$(ls /sys/class/hidraw)" ] && break; sleep 0.1; done
echo "hidraw_after_replug=$(ls /sys/class/hidraw | wc -l)"
for _ in $(seq 600); do [ -S {SOCK} ] && [ "$(stat -c %i {SOCK})" != "$ino" ] && break; sleep 0.1; done
echo "new_socket=$([ "$(stat -c %i {SOCK} 2>/dev/null)" != "$ino" ] && echo yes)"
{_ATTACH}
{NODE} fido2-token -I "$n" | grep -E '^(pin retries|options):'
""", timeout=180)
    out = r.stdout
    assert "hidraw_after_replug=0\n" in out, out
    assert "new_socket=yes" in out, out
    assert r.returncode == 0, out + r.stderr
    assert "pin retries: 8" in out and "clientPin" in out and "noclientPin" not in out, out


def test_a_key_that_is_not_there_cannot_be_attached(devices):
    """No external key behind the socket path: the import is refused, as for a USB key that is not plugged in."""
    r = devices.sh("""set -u
d=/tmp/no-key; rm -rf $d; mkdir -p $d
vt="${TB_BIN:-$LAB_ROOT/.build/debug}/virtual-token"
setsid "$vt" usbip --listen 127.0.0.1:3286 --device fido-external --fido-socket $d/none.sock --state-dir $d \\
  >$d/server.log 2>&1 </dev/null & pid=$!
for _ in $(seq 100); do usbip --tcp-port 3286 list -r 127.0.0.1 >/dev/null 2>&1 && break; sleep 0.1; done
before=$(ls /sys/class/hidraw | wc -l)
usbip --tcp-port 3286 attach -r 127.0.0.1 -b 1-1; echo "attach=$?"
sleep 1; echo "new_hidraw=$(( $(ls /sys/class/hidraw | wc -l) - before ))"
kill $pid; wait $pid
cat $d/server.log
""")
    assert "attach=0" not in r.stdout and "attach=" in r.stdout, r.stdout + r.stderr
    assert "new_hidraw=0" in r.stdout
    assert "no external key at /tmp/no-key/none.sock (No such file or directory): not attached" in r.stdout
