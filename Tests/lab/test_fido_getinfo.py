"""One open per command over a real kernel hidraw node (every exchange goes through libfido2). A command's session
(`fido2 info`) and a listing (`tokens`) each open the key once through libfido2 (`fido_dev_open`: INIT and getInfo
inside it) and send one getInfo of their own (`fido_dev_get_cbor_info`: libfido2 1.12 does not hand out the answer of
its open), which the trace shows (`fido2 > open`, `fido2 > getInfo`)."""

SCRIPT = r"""
set -u
vt="${TB_BIN:-$LAB_ROOT/.build/debug}"
w=$(mktemp -d /tmp/getinfo.XXXXXX)
export XDG_DATA_HOME=$w/d XDG_CONFIG_HOME=$w/c
env -u TOKENBRIDGE_VIRTUAL_FIDO "$vt/tokenbridge" CMD --trace --json >"$w/out" 2>"$w/trace"
echo "rc=$?"
cat "$w/trace"
"""


def test_a_command_over_hidraw_opens_the_key_once(dut):
    r = dut.sh(SCRIPT.replace("CMD", "fido2 info"), kind="fido")
    assert "rc=0" in r.stdout, r.stdout[-3000:]
    assert r.stdout.count("fido2 > open") == 1, r.stdout[-3000:]
    assert r.stdout.count("fido2 > getInfo") == 1, r.stdout[-3000:]


def test_a_listing_over_hidraw_opens_the_key_once(dut):
    r = dut.sh(SCRIPT.replace("CMD", "tokens"), kind="fido")
    assert "rc=0" in r.stdout, r.stdout[-3000:]
    assert r.stdout.count("fido2 > open") == 1, r.stdout[-3000:]
    assert r.stdout.count("fido2 > getInfo") == 1, r.stdout[-3000:]
