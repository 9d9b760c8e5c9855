"""The virtual FIDO HID device over USB/IP, seen by the guest kernel, udev and real clients."""
import json


def test_fido2_token_lists_and_reads_it(devices):
    r = devices.sh("fido2-token -L && fido2-token -I $(fido2-token -L | cut -d: -f1 | head -1)", attach=["fido"])
    assert r.returncode == 0, r.stdout
    assert r.stdout.startswith("/dev/hidraw0: vendor=0x"), r.stdout
    assert "FIDO_2_0" in r.stdout or "FIDO_2_1" in r.stdout


def test_udev_tags_the_hidraw_node(devices):
    r = devices.sh("udevadm info -q property -n /dev/hidraw0; udevadm info -q all -n /dev/hidraw0 | grep -i tags",
                   attach=["fido"])
    assert r.returncode == 0, r.stdout
    assert "ID_FIDO_TOKEN=1" in r.stdout.splitlines()
    assert "ID_SECURITY_TOKEN=1" in r.stdout.splitlines()
    assert ":uaccess:" in r.stdout


def test_python_fido2_finds_it(devices):
    r = devices.run("python3", "-c", "from fido2.hid import CtapHidDevice as D; "
                    "print(len(list(D.list_devices())))", attach=["fido"])
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stdout


def test_tokenbridge_lists_it_through_libfido2_enumeration(devices):
    r = devices.sh('env -u TOKENBRIDGE_VIRTUAL_FIDO "$TB_BIN/tokenbridge" tokens --json', attach=["fido"])
    assert r.returncode == 0, r.stdout
    fido = [t for t in json.loads(r.stdout) if t["kind"] == "fido2"]
    assert len(fido) == 1


def test_project_rules_apply_to_the_device(devices):
    r = devices.sh("udevadm test $(udevadm info -q path -n /dev/hidraw0) 2>&1 | grep -c 70-tokenbridge.rules",
                   attach=["fido"])
    assert r.returncode == 0 and int(r.stdout.strip().splitlines()[-1]) >= 1, r.stdout
