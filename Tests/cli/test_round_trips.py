"""APDUs per PIV command, counted from pcscd's own APDU log (pcscd -a; Tools/test starts it so): what each command
sends, in order, so that a SELECT, a serial or a tries read sent twice fails here (issue 12). Counts only, no time."""
import os

import pytest

from conftest import TOKENBRIDGE, wait_until  # noqa: F401
from test_uaf import home, rp, tb  # noqa: F401 (fixtures)

LOG = os.path.join(os.environ.get("TB_RUN_DIR", "/nonexistent"), "pcscd.log")

SELECT, VERSION, SERIAL = "A4", "FD", "F8"
PIN_METADATA = "F7 80"  # GET METADATA for the PIN: its tries, without spending one
VERIFY, CHANGE, SIGN = "20 80", "24 80", "87"


def apdu_lines():
    try:
        with open(LOG, errors="replace") as f:
            return [line.split(" APDU: ", 1)[1].split() for line in f if " APDU: " in line]
    except FileNotFoundError:
        return []


@pytest.fixture
def apdus():
    """Call `mark()` before a command and `since()` after it: the APDUs pcscd passed to the card meanwhile,
    each as "INS", "INS P2" (VERIFY, CHANGE REFERENCE DATA, GET METADATA carry their reference in P2) or
    "CB tag" (GET DATA and the object it reads)."""
    with open(f"/proc/{os.environ.get('TB_PCSCD_PID', 'self')}/cmdline", "rb") as f:
        pcscd_args = f.read().split(b"\0")
    if b"-a" not in pcscd_args and b"--apdu" not in pcscd_args:
        pytest.fail("pcscd logs no APDUs: run through Tools/test, or Tools/with-pcscd with TB_PCSCD_ARGS=-a")

    class Counter:
        start = 0

        def mark(self):
            self.start = len(apdu_lines())

        def since(self):
            out = []
            for h in apdu_lines()[self.start:]:
                ins = h[1]
                if ins in ("20", "24", "2C", "F7"):
                    out.append(f"{ins} {h[3]}")
                elif ins == "CB" and len(h) > 7:  # GET DATA: the object's tag from 5C
                    out.append(f"CB {''.join(h[7:7 + int(h[6], 16)])}")
                else:
                    out.append(ins)
            return out

    return Counter()


@pytest.fixture
def signing_key(card, home):  # noqa: F811
    r = tb(home, "key", "generate", "--slot", "9a", "--force")
    assert r.returncode == 0, r.stderr
    return card


def sign(home, tmp_path, pins):  # noqa: F811
    msg = tmp_path / "msg"
    msg.write_bytes(b"round trips")
    return tb(home, "key", "sign", "--slot", "9a", "--input", str(msg), "--output", str(tmp_path / "sig"), pins=pins)


def test_verify_and_sign_select_once_and_read_the_tries_once(signing_key, home, apdus, tmp_path):  # noqa: F811
    apdus.mark()
    r = sign(home, tmp_path, ["123456"])
    assert r.returncode == 0, r.stderr
    # The tries are read once, before the VERIFY, in the one transaction the command holds.
    assert apdus.since() == [SELECT, VERSION, SERIAL, PIN_METADATA, VERIFY, SIGN]


def test_a_wrong_pin_answer_gives_the_next_count(signing_key, home, apdus, tmp_path):  # noqa: F811
    apdus.mark()
    r = sign(home, tmp_path, ["000000", "123456"])
    assert r.returncode == 0, r.stderr
    assert "2 tries left" in r.stderr
    # 63C2 from the wrong VERIFY is the count before the second attempt: no second GET METADATA.
    assert apdus.since() == [SELECT, VERSION, SERIAL, PIN_METADATA, VERIFY, VERIFY, SIGN]


def test_pin_change_select_once_and_read_the_tries_once(card, home, apdus):  # noqa: F811
    apdus.mark()
    r = tb(home, "pin", "change", pins=["123456", "24681357"])
    assert r.returncode == 0, r.stderr
    assert apdus.since() == [SELECT, VERSION, SERIAL, PIN_METADATA, CHANGE]


def test_uaf_authentication_sends_nothing_twice(card, rp, home, apdus):  # noqa: F811
    server = rp()
    r = tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"])
    assert r.returncode == 0, r.stderr
    apdus.mark()
    r = tb(home, "authenticate", "--username", "alice", "--server", server.url, pins=["123456"])
    assert r.returncode == 0, r.stderr
    sent = apdus.since()
    assert len(sent) == len(set(sent)), f"an APDU sent twice: {sent}"
    assert sent == [SELECT, VERSION, SERIAL, PIN_METADATA, VERIFY, SIGN]
