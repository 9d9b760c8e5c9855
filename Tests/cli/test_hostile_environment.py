"""What the machine around tokenbridge says is untrusted too: another process's name, shown by doctor as the card's
holder, is made displayable like any token's or server's text; a FIDO2 key that fails its probe on a machine without
pcscd is reported as that key's failure, with the missing pcscd beside it, not as "pcscd is not running" alone."""
import json
import subprocess
import sys

import pytest

from conftest import tb
from test_doctor_checks import HOLDER
from test_stalled_key import stalled_key

# prctl(PR_SET_NAME) takes 15 bytes: an OSC title sequence (ESC ] 0 ; ... BEL) and a colour (ESC [ 31 m).
HOSTILE_NAME = b"\x1b]0;pw\x07\x1b[31mx"
SHOWN_NAME = "\\u{1B}]0;pw\\u{7}\\u{1B}[31mx"


def hostile_holder(reader):
    script = HOLDER.replace('b"scdaemon"', repr(HOSTILE_NAME))
    assert script != HOLDER
    return subprocess.Popen([sys.executable, "-c", script, reader], stdout=subprocess.PIPE, text=True)


def doctor_env(tmp_path):
    home = tmp_path / "home"
    return {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local/share")}


def test_doctor_shows_a_card_holders_name_escaped(card, tmp_path):
    holder = hostile_holder(card.reader)
    try:
        assert holder.stdout.readline() == "held\n"
        with open(f"/proc/{holder.pid}/comm", "rb") as f:
            assert f.read().rstrip(b"\n") == HOSTILE_NAME  # the kernel kept the escapes
        j = tb("doctor", "--json", env=doctor_env(tmp_path))
        text = tb("doctor", env=doctor_env(tmp_path))
    finally:
        holder.kill()
        holder.wait()
    assert j.returncode == 35 and text.returncode == 35, j.stderr + text.stderr
    access = {c["name"]: c for c in json.loads(j.stdout)}["card access"]
    assert access["detail"] == (f"the card in {card.reader} is held exclusively by another program: running "
                                f"{SHOWN_NAME} (pid {holder.pid})")
    assert "\x1b" not in text.stdout and "\x07" not in text.stdout, repr(text.stdout)
    assert f"running {SHOWN_NAME} (pid {holder.pid})" in text.stdout


@pytest.fixture
def silent_key(tmp_path):
    with stalled_key(str(tmp_path / "stall.sock"), "silent") as path:
        yield path


def no_pcscd(tmp_path, key):
    # A socket path where no pcscd listens: pcsc-lite answers "no service", as on a machine without pcscd.
    return {"PCSCLITE_CSOCK_NAME": str(tmp_path / "no-pcscd.comm"), "TOKENBRIDGE_VIRTUAL_FIDO": key,
            "XDG_CONFIG_HOME": str(tmp_path / "c"), "XDG_DATA_HOME": str(tmp_path / "d")}


KEY_FAILURE = "The token did not answer (open) in time: remove and re-insert it, then try again."
PCSCD = "The PC/SC service (pcscd) is not running."


def test_tokens_without_pcscd_names_the_failing_key(silent_key, tmp_path):
    r = tb("tokens", env=no_pcscd(tmp_path, silent_key), timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"({silent_key}: {KEY_FAILURE})" in r.stdout, r.stdout
    assert f"(smart cards: {PCSCD}" in r.stdout, r.stdout


def test_a_command_without_pcscd_names_the_failing_key(silent_key, tmp_path):
    r = tb("pin", "status", env=no_pcscd(tmp_path, silent_key), timeout=60)
    assert r.returncode == 11, r.stderr
    assert r.stderr.startswith("tokenbridge: No usable token found.\n"), r.stderr
    assert f"  {silent_key}: {KEY_FAILURE}\n" in r.stderr, r.stderr
    assert f"  smart cards: {PCSCD}" in r.stderr, r.stderr


def test_the_failing_key_named_without_pcscd_is_its_own_error(silent_key, tmp_path):
    r = tb("pin", "status", "--token", "fido2-stall-sock", env=no_pcscd(tmp_path, silent_key), timeout=60)
    assert r.returncode == 14, r.stderr
    assert KEY_FAILURE in r.stderr and "pcscd" not in r.stderr, r.stderr
