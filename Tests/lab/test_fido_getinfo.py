"""getInfo once over a real kernel hidraw node (issue 12). A command that opens a libfido2 session (`fido2 info`):
our hidraw I/O (HidrawFIDOIO) keeps the answer to the getInfo libfido2's open sends, so the command sends no
getInfo of its own. A listing (`tokens`) opens no session: it reads the key over CTAPHID of its own (INIT,
getInfo, PIN tries), one getInfo. The trace says which (`fido2 getInfo: the answer to libfido2's open`,
`fido2 > getInfo` for a request of ours)."""

SCRIPT = r"""
set -u
vt="${TB_BIN:-$LAB_ROOT/.build/debug}"
w=$(mktemp -d /tmp/getinfo.XXXXXX)
export XDG_DATA_HOME=$w/d XDG_CONFIG_HOME=$w/c
env -u TOKENBRIDGE_VIRTUAL_FIDO "$vt/tokenbridge" CMD --trace --json >"$w/out" 2>"$w/trace"
echo "rc=$?"
cat "$w/trace"
"""


def test_a_command_over_hidraw_uses_the_opens_getinfo(dut):
    r = dut.sh(SCRIPT.replace("CMD", "fido2 info"), kind="fido")
    assert "rc=0" in r.stdout, r.stdout[-3000:]
    assert "fido2 getInfo: the answer to libfido2's open (no request)" in r.stdout, r.stdout[-3000:]
    assert "fido2 > getInfo" not in r.stdout, r.stdout[-3000:]


def test_a_listing_over_hidraw_reads_the_key_itself_once(dut):
    r = dut.sh(SCRIPT.replace("CMD", "tokens"), kind="fido")
    assert "rc=0" in r.stdout, r.stdout[-3000:]
    assert r.stdout.count("fido2 > CTAPHID_INIT") == 1, r.stdout[-3000:]
    assert r.stdout.count("fido2 > getInfo") == 1, r.stdout[-3000:]
    assert "libfido2's open" not in r.stdout, r.stdout[-3000:]
