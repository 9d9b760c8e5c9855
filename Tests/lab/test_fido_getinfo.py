"""getInfo once over a real kernel hidraw node (issue 12): our hidraw I/O (HidrawFIDOIO) keeps the answer to the
getInfo libfido2's open sends, so discovery and the command send no getInfo of their own. The trace says which
(`fido2 getInfo: the answer to libfido2's open`, or `fido2 > getInfo` for a request of ours)."""

SCRIPT = r"""
set -u
vt="${TB_BIN:-$LAB_ROOT/.build/debug}"
w=$(mktemp -d /tmp/getinfo.XXXXXX)
export XDG_DATA_HOME=$w/d XDG_CONFIG_HOME=$w/c
env -u TOKENBRIDGE_VIRTUAL_FIDO "$vt/tokenbridge" tokens --trace --json >"$w/out" 2>"$w/trace"
echo "rc=$?"
cat "$w/trace"
"""


def test_discovery_over_hidraw_uses_the_opens_getinfo(dut):
    r = dut.sh(SCRIPT, kind="fido")
    assert "rc=0" in r.stdout, r.stdout[-3000:]
    assert "fido2 getInfo: the answer to libfido2's open (no request)" in r.stdout, r.stdout[-3000:]
    assert "fido2 > getInfo" not in r.stdout, r.stdout[-3000:]
