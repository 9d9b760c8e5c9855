"""APDUs per PIV command, counted from pcscd's own APDU log (pcscd -a; Tools/test starts it so): what each command
sends, in order, so that a SELECT, a serial or a tries read sent twice fails here. Counts only, no time.

The PIV flows also run on CanoKey's card (implementations.piv_params) for what the user sees (exit code, output);
their APDUs are counted on the virtual card only: CanoKey's card is in a pcscd of its own, whose log this suite
does not read. The FIDO2 tests count requests in the virtual key's log and use its options; the flow they time
(register, authenticate) runs on every FIDO2 implementation in test_fido2_cli.test_uaf_with_the_fido2_key."""
import json
import os

import pytest

from conftest import TOKENBRIDGE, wait_until  # noqa: F401
from fido2_conn import Key
from implementations import piv_params
from test_uaf import home, rp, tb  # noqa: F401 (fixtures)

LOG = os.path.join(os.environ.get("TB_RUN_DIR", "/nonexistent"), "pcscd.log")

SELECT, VERSION, SERIAL = "A4", "FD", "F8"
PIN_METADATA = "F7 80"  # GET METADATA for the PIN: its tries, maximum and default flag, without spending one
PUK_METADATA = "F7 81"  # the same for the PUK (pin status shows it, as tokens does)
TRIES = "20 80 -"  # VERIFY without data (SP 800-73-4 §3.2.1): 63Cx, the tries left, without spending one
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
        card = None  # set by the tests that take a parametrized card

        def mark(self):
            self.start = len(apdu_lines())

        def since(self):
            """None on a card of another pcscd (CanoKey's): its APDUs are not in this log."""
            if self.card is not None and self.card.impl != "virtual":
                return None
            out = []
            for h in apdu_lines()[self.start:]:
                ins = h[1]
                if ins in ("20", "24", "2C", "F7"):
                    out.append(f"{ins} {h[3]}" + (" -" if ins == "20" and len(h) == 4 else ""))
                elif ins == "CB" and len(h) > 7:  # GET DATA: the object's tag from 5C
                    out.append(f"CB {''.join(h[7:7 + int(h[6], 16)])}")
                else:
                    out.append(ins)
            return out

    return Counter()


# What each card calls itself: (the version its name shows, its reader's token id).
NAMES = {"virtual": ("YubiKey 5.4.3", "piv-virtual-pcd-00-00"),
         "canokey": ("YubiKey 5.7.0", "piv-canokey--openpgp-piv-oath--00-00")}


def counted(apdus, card, expected):
    """The APDUs since mark() are `expected`, on the virtual card (see the module's docstring)."""
    apdus.card = card
    sent = apdus.since()
    if sent is not None:
        assert sent == expected, sent


@pytest.fixture
def signing_key(card, home):  # noqa: F811
    r = tb(home, "key", "generate", "--slot", "9a", "--force")
    assert r.returncode == 0, r.stderr
    return card


def sign(home, tmp_path, pins):  # noqa: F811
    msg = tmp_path / "msg"
    msg.write_bytes(b"round trips")
    return tb(home, "key", "sign", "--slot", "9a", "--input", str(msg), "--output", str(tmp_path / "sig"), pins=pins)


@pytest.mark.parametrize("card", piv_params(), indirect=True)
def test_verify_and_sign_select_once_and_read_the_tries_once(signing_key, home, apdus, tmp_path):  # noqa: F811
    apdus.mark()
    r = sign(home, tmp_path, ["123456"])
    assert r.returncode == 0, r.stderr
    # A script's run (--pin-fd) of a command that names no token: the lone card is not asked who it is (no GET
    # SERIAL: its lines name its reader), the empty VERIFY gives the tries (no GET VERSION to learn whether GET
    # METADATA exists).
    counted(apdus, signing_key, [SELECT, TRIES, VERIFY, SIGN])
    reader_id = NAMES[signing_key.impl][1]
    assert r.stderr == f"PIV card in {signing_key.reader} ({reader_id}): PIN 3 tries left.\n", r.stderr


@pytest.mark.parametrize("card", piv_params(), indirect=True)
def test_a_wrong_pin_answer_gives_the_next_count(signing_key, home, apdus, tmp_path):  # noqa: F811
    apdus.mark()
    r = sign(home, tmp_path, ["000000", "123456"])
    assert r.returncode == 0, r.stderr
    assert "2 tries left" in r.stderr
    # The card is named by its reader (it was not asked its serial).
    assert f"PIV card in {signing_key.reader}" in r.stderr and signing_key.id not in r.stderr, r.stderr
    # 63C2 from the wrong VERIFY is the count before the second attempt: no second read of the tries.
    counted(apdus, signing_key, [SELECT, TRIES, VERIFY, VERIFY, SIGN])


@pytest.mark.parametrize("card", piv_params(), indirect=True)
def test_pin_change_select_once_and_read_the_tries_once(card, home, apdus):  # noqa: F811
    apdus.mark()
    r = tb(home, "pin", "change", pins=["123456", "24681357"])
    assert r.returncode == 0, r.stderr
    assert r.stdout == "PIN changed.\n"
    counted(apdus, card, [SELECT, TRIES, CHANGE])


@pytest.mark.parametrize("card", piv_params(), indirect=True)
def test_pin_change_with_json_names_the_token_so_it_asks_the_serial(card, home, apdus):  # noqa: F811
    apdus.mark()
    r = tb(home, "pin", "change", "--json", pins=["123456", "24681357"])
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"result": "PIN changed.", "token": card.id}
    counted(apdus, card, [SELECT, SERIAL, TRIES, CHANGE])


@pytest.mark.parametrize("card", piv_params(), indirect=True)
def test_pin_status_reads_what_it_shows(card, home, apdus):  # noqa: F811
    apdus.mark()
    r = tb(home, "pin", "status")
    assert r.returncode == 0, r.stderr
    assert f"{NAMES[card.impl][0]} ({card.id})" in r.stdout and "PIN: 3 tries left (of 3)" in r.stdout, r.stdout
    assert "PUK: 3 tries left (of 3)" in r.stdout
    # The name shows the version, the tries lines the maximum and the default flag: GET VERSION, GET METADATA.
    counted(apdus, card, [SELECT, VERSION, SERIAL, PIN_METADATA, PUK_METADATA])


def test_a_named_token_leaves_the_other_cards_tries_alone(cards, home, apdus, tmp_path):  # noqa: F811
    cards(slot=0)
    second = cards(slot=1)
    apdus.mark()
    r = tb(home, "pin", "change", "--token", second.id, pins=["123456", "24681357"])
    assert r.returncode == 0, r.stderr
    # The first card is asked who it is (it is not the one) and nothing else. (Cards are probed in parallel:
    # their APDUs interleave in pcscd's log, so the probes are compared as a multiset.) With several cards no probe
    # keeps its card (a process that waits for one card while it holds another can deadlock with one that probes
    # them in another order: test_many_cards.py), so the chosen card is taken again for the change: SELECT and the
    # tries once more, in the transaction of the change.
    sent = apdus.since()
    assert sorted(sent[:-3]) == sorted([SELECT, SERIAL, SELECT, SERIAL, TRIES]), sent
    assert sent[-3:] == [SELECT, TRIES, CHANGE], sent


@pytest.mark.parametrize("card", piv_params(), indirect=True)
def test_uaf_authentication_sends_nothing_twice(card, rp, home, apdus):  # noqa: F811
    server = rp()
    r = tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"])
    assert r.returncode == 0, r.stderr
    apdus.mark()
    r = tb(home, "authenticate", "--username", "alice", "--server", server.url, pins=["123456"])
    assert r.returncode == 0, r.stderr
    assert json.loads(tb(home, "authenticators", "--json").stdout)[0]["token"] == card.id
    # The serial binds the registration to this card (its records carry the token id).
    counted(apdus, card, [SELECT, SERIAL, TRIES, VERIFY, SIGN])


# FIDO2: CTAPHID requests as the virtual key logs them (`virtual-token fido2 --log-requests`), one entry per
# request: "INIT", or the CTAP command inside CBOR (and CLIENT_PIN for each authenticatorClientPIN subcommand).
INIT, GET_INFO, CLIENT_PIN, GET_ASSERTION = "INIT", "getInfo", "clientPIN", "getAssertion"
CTAP_NAMES = {"0x86": INIT, "0x04": GET_INFO, "0x06": CLIENT_PIN, "0x02": GET_ASSERTION, "0x01": "makeCredential"}


@pytest.fixture
def fido_key(tmp_path, home):  # noqa: F811
    key = Key(tmp_path, "--log-requests")
    env = dict(home, TOKENBRIDGE_VIRTUAL_FIDO=key.sock)
    assert tb(env, "pin", "set", pins=["11111111"]).returncode == 0

    class Requests:
        start = 0

        def lines(self):
            with open(key.sock + ".log", errors="replace") as f:
                return [line for line in f if "request cmd=" in line]

        def mark(self):
            self.start = len(self.lines())

        def since(self):
            out = []
            for line in self.lines()[self.start:]:
                cmd = line.split("request cmd=", 1)[1].split()
                out.append(CTAP_NAMES.get(cmd[1].split("=")[1] if len(cmd) > 1 else cmd[0], " ".join(cmd)))
            return out

    yield env, Requests()
    key.stop()


def test_fido2_assertion_agrees_a_key_once(fido_key, rp):  # noqa: F811
    env, requests = fido_key
    server = rp()
    r = tb(env, "register", "--username", "alice", "--server", server.url, pins=["11111111"])
    assert r.returncode == 0, r.stderr
    requests.mark()
    r = tb(env, "authenticate", "--username", "alice", "--server", server.url, pins=["11111111"])
    assert r.returncode == 0, r.stderr
    # libfido2's open (INIT, getInfo); the PIN tries, before the PIN is tried (getPINRetries, house rule);
    # getKeyAgreement, once: its shared secret serves the PIN token and the hmac-secret salt; the PIN token
    # (getPinUvAuthTokenUsingPinWithPermissions, as getInfo's pinUvAuthToken allows); the assertion. libfido2's own
    # fido2-assert sends the same but the tries (Tools/bench/fido2 counts both).
    assert requests.since() == [INIT, GET_INFO, CLIENT_PIN, CLIENT_PIN, CLIENT_PIN, GET_ASSERTION]


def test_fido2_assertion_names_a_forced_pin_change(tmp_path, rp, home):  # noqa: F811
    """The assertion reads no getInfo of its own, so forcePINChange (getInfo 0x0C) is not known before the PIN is
    tried: the key's refusal of the PIN token (CTAP2_ERR_PIN_POLICY_VIOLATION, CTAP 2.1 §6.5.5.7) means it then,
    and the command ends with "change the PIN first" (exit 16), not a format error."""
    key = Key(tmp_path)
    env = dict(home, TOKENBRIDGE_VIRTUAL_FIDO=key.sock)
    server = rp()
    try:
        assert tb(env, "pin", "set", pins=["11111111"]).returncode == 0
        r = tb(env, "register", "--username", "alice", "--server", server.url, pins=["11111111"])
        assert r.returncode == 0, r.stderr
        key.stop()
        os.path.exists(key.sock) and os.unlink(key.sock)
        key.args = ("--force-pin-change",)
        key.start()
        r = tb(env, "authenticate", "--username", "alice", "--server", server.url, pins=["11111111"])
        assert r.returncode == 16 and "pin change" in r.stderr, (r.returncode, r.stderr)
    finally:
        key.stop()
