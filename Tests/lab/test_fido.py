"""The FIDO HID device seen by the guest kernel, udev and real clients: the virtual one over USB/IP, or a resident
token (a real one passed through, or the stand-in; see conftest)."""
import json

from conftest import flows

NODE = 'n=$(fido2-token -L | cut -d: -f1 | head -1); '


def test_fido2_token_lists_and_reads_it(dut):
    r = dut.sh(NODE + 'fido2-token -L && fido2-token -I "$n"', kind="fido")
    assert r.returncode == 0, r.stdout
    if dut.virtual:
        assert r.stdout.startswith("/dev/hidraw0: vendor=0x1209, product=0x0001 (TokenBridge Virtual FIDO2 Key)")
        assert "version strings: FIDO_2_0, FIDO_2_1" in r.stdout
        assert "pin retries: 8" in r.stdout
    else:
        vid, pid = dut.info["vidpid"].split(":")
        assert r.stdout.startswith(f"/dev/{dut.info['hidraw']}: vendor=0x{vid}, product=0x{pid} "), r.stdout
        assert "FIDO_2_0" in r.stdout and "pin retries: " in r.stdout


def test_udev_tags_the_hidraw_node_and_applies_our_rule(dut):
    r = dut.sh(NODE + 'udevadm info -q property -n "$n"; udevadm info -q all -n "$n" | grep -i tags', kind="fido")
    assert r.returncode == 0, r.stdout
    lines = r.stdout.splitlines()
    assert "ID_FIDO_TOKEN=1" in lines and "ID_SECURITY_TOKEN=1" in lines
    assert "TOKENBRIDGE_TOKEN=fido2" in lines  # set only by udev/70-tokenbridge.rules
    assert ":uaccess:" in r.stdout


def test_python_fido2_finds_and_talks_to_it(dut):
    r = dut.run("python3", "-c", "from fido2.hid import CtapHidDevice as D; from fido2.ctap2 import Ctap2; "
                "d = list(D.list_devices()); print(len(d), Ctap2(d[0]).get_info().versions)", kind="fido")
    assert r.returncode == 0, r.stdout
    assert r.stdout.split(" ", 1)[0] == "1" and ("FIDO_2_1" if dut.virtual else "FIDO_2_0") in r.stdout


def test_tokenbridge_flows_through_libfido2_hidraw_enumeration(dut):
    """Over the kernel's hidraw node: `tokens` and, through libfido2's enumeration with our hidraw I/O
    (HidrawFIDOIO), pin set/status, register, authenticate, deregister against the RP in the guest: every command
    sees the same key under the same id."""
    result = flows(dut, "fido")
    steps = {s["cmd"].split(" --")[0]: s for s in result["steps"]}
    assert all(s["rc"] == 0 for s in result["steps"]), result["steps"]
    listed = json.loads(steps["tokens"]["stdout"])
    if dut.virtual:
        assert [(t["kind"], t["id"]) for t in listed] == [("fido2", "fido2-hidraw0")]
    else:  # one entry per physical token: the key's id is among its ids
        assert [t for t in listed if f"fido2-{dut.info['hidraw']}" in t.get("ids", [t["id"]])]
    assert json.loads(steps["pin status"]["stdout"])["pin"]["retriesLeft"] == 8
    assert [r["aaid"] for r in result["registrations"]] == ["7B1D#0002"]
    # A real key may keep one signature counter for all credentials: only the virtual one starts at 0.
    counter = result["registrations"][0]["counter"]
    assert counter == 1 if dut.virtual else counter >= 1
    assert result["after"] == []
