"""The virtual FIDO HID device over USB/IP, seen by the guest kernel, udev and real clients."""
import json

from conftest import flows


def test_fido2_token_lists_and_reads_it(devices):
    r = devices.sh("fido2-token -L && fido2-token -I $(fido2-token -L | cut -d: -f1 | head -1)", attach=["fido"])
    assert r.returncode == 0, r.stdout
    assert r.stdout.startswith("/dev/hidraw0: vendor=0x1209, product=0x0001 (TokenBridge Virtual FIDO2 Key)"), r.stdout
    assert "version strings: FIDO_2_0, FIDO_2_1" in r.stdout
    assert "pin retries: 8" in r.stdout


def test_udev_tags_the_hidraw_node_and_applies_our_rule(devices):
    r = devices.sh("udevadm info -q property -n /dev/hidraw0; udevadm info -q all -n /dev/hidraw0 | grep -i tags",
                   attach=["fido"])
    assert r.returncode == 0, r.stdout
    lines = r.stdout.splitlines()
    assert "ID_FIDO_TOKEN=1" in lines and "ID_SECURITY_TOKEN=1" in lines
    assert "TOKENBRIDGE_TOKEN=fido2" in lines  # set only by udev/70-tokenbridge.rules
    assert ":uaccess:" in r.stdout


def test_python_fido2_finds_and_talks_to_it(devices):
    r = devices.run("python3", "-c", "from fido2.hid import CtapHidDevice as D; from fido2.ctap2 import Ctap2; "
                    "d = list(D.list_devices()); print(len(d), Ctap2(d[0]).get_info().versions)", attach=["fido"])
    assert r.returncode == 0, r.stdout
    assert r.stdout.split(" ", 1)[0] == "1" and "FIDO_2_1" in r.stdout


def test_tokenbridge_flows_through_libfido2_hidraw_enumeration(devices):
    """No custom I/O: tokens, pin set/status, register, authenticate, deregister against the RP in the guest."""
    result = flows(devices, "fido", attach=["fido"])
    steps = {s["cmd"].split(" --")[0]: s for s in result["steps"]}
    assert all(s["rc"] == 0 for s in result["steps"]), result["steps"]
    listed = json.loads(steps["tokens"]["stdout"])
    assert [(t["kind"], t["id"]) for t in listed] == [("fido2", "fido2-hidraw0")]
    assert json.loads(steps["pin status"]["stdout"])["pin"]["retriesLeft"] == 8
    assert [r["aaid"] for r in result["registrations"]] == ["7B1D#0002"]
    assert result["registrations"][0]["counter"] == 1 and result["after"] == []
