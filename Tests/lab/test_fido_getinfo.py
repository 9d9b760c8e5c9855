"""getInfo once over a real kernel hidraw node (issue 12). A command's session (`fido2 info`) speaks over a channel
of its own (CTAP2Link: INIT, then getInfo when asked); libfido2 is not loaded. A listing (`tokens`) opens no
session: it reads the key over CTAPHID of its own too (INIT, getInfo, PIN tries). Either way one INIT and one
getInfo, which the trace shows (`fido2 > CTAPHID_INIT`, `fido2 > getInfo`)."""

SCRIPT = r"""
set -u
vt="${TB_BIN:-$LAB_ROOT/.build/debug}"
w=$(mktemp -d /tmp/getinfo.XXXXXX)
export XDG_DATA_HOME=$w/d XDG_CONFIG_HOME=$w/c
env -u TOKENBRIDGE_VIRTUAL_FIDO "$vt/tokenbridge" CMD --trace --json >"$w/out" 2>"$w/trace"
echo "rc=$?"
cat "$w/trace"
"""


def test_a_command_over_hidraw_sends_getinfo_once_over_its_own_channel(dut):
    r = dut.sh(SCRIPT.replace("CMD", "fido2 info"), kind="fido")
    assert "rc=0" in r.stdout, r.stdout[-3000:]
    assert r.stdout.count("fido2 > CTAPHID_INIT") == 1, r.stdout[-3000:]
    assert r.stdout.count("fido2 > getInfo") == 1, r.stdout[-3000:]


def test_a_listing_over_hidraw_reads_the_key_itself_once(dut):
    r = dut.sh(SCRIPT.replace("CMD", "tokens"), kind="fido")
    assert "rc=0" in r.stdout, r.stdout[-3000:]
    assert r.stdout.count("fido2 > CTAPHID_INIT") == 1, r.stdout[-3000:]
    assert r.stdout.count("fido2 > getInfo") == 1, r.stdout[-3000:]
    assert "libfido2's open" not in r.stdout, r.stdout[-3000:]
