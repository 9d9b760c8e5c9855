"""The tokenbridge CLI as users and scripts run it, against the virtual card through the real pcscd."""
import json
import os
import re
import select
import signal
import subprocess
import sys

import pexpect
import pytest

from conftest import ROOT, TOKENBRIDGE, pin_tries, piv_tool, tb, wait_until, card_present
from implementations import piv_params


def spawn(*args):
    child = pexpect.spawn(TOKENBRIDGE, list(args), encoding="utf-8", timeout=30)
    child.logfile_read = sys.stdout
    return child


def answer(child, first_prompt, first, new, repeat=None):
    """Answers one round of a change dialog: the current PIN/PUK, the new one and its repetition."""
    child.expect(first_prompt)
    child.sendline(first)
    child.expect("New PIN: ")
    child.sendline(new)
    child.expect("Repeat new PIN: ")
    child.sendline(new if repeat is None else repeat)


def finish(child, text):
    child.expect(text)
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus


def test_tokens_lists_the_card(card):
    r = tb("tokens")
    assert r.returncode == 0, r.stderr
    assert card.id in r.stdout and "Virtual PCD 00 00" in r.stdout
    assert "PIN: 3 tries left (of 3)" in r.stdout
    data = json.loads(tb("tokens", "--json").stdout)
    assert [t["id"] for t in data] == [card.id]
    t = data[0]
    assert t["kind"] == "piv" and t["capabilities"] == ["piv"] and t["reader"] == card.reader
    assert t["pin"]["retriesLeft"] == 3 and t["puk"]["retriesLeft"] == 3


def test_tokens_with_token_lists_only_that_one(cards):
    """`tokens --token ID` shows the named token only, and says which are there when it is not (exit 4, no token);
    it used to list every token whatever --token said."""
    first, second = cards(0), cards(1)
    data = json.loads(tb("tokens", "--json", "--token", second.id).stdout)
    assert [t["id"] for t in data] == [second.id], data
    r = tb("tokens", "--token", first.id)
    assert r.returncode == 0 and first.id in r.stdout and second.id not in r.stdout, r.stdout
    assert "no card" not in r.stdout, r.stdout  # nothing about other readers either
    r = tb("tokens", "--token", "piv-12345")
    assert r.returncode == 4, r.stdout + r.stderr
    assert r.stderr == f"tokenbridge: No token piv-12345. Tokens present: {first.id}, {second.id}.\n", r.stderr


@pytest.mark.parametrize("card", piv_params(), indirect=True)
def test_new_user_story(card):
    """README's walk: wrong old PIN (2 tries left), then right; yubico-piv-tool verifies the new PIN;
    three wrong PINs block it (distinct exit code); pin unblock with the PUK restores it."""
    child = spawn("pin", "change")
    child.expect(re.escape("PIN 3 tries left (of 3)"))
    answer(child, "Current PIN: ", "654321", "24681357")
    child.expect("Wrong PIN; 2 tries left.")
    answer(child, "Current PIN: ", "123456", "24681357")
    assert finish(child, "PIN changed.") == 0
    assert piv_tool("-a", "verify-pin", "-P", "24681357").returncode == 0

    assert tb("pin", "change", pins=["000000", "111111"]).returncode == 6
    assert tb("pin", "change", pins=["000000", "111111"]).returncode == 6
    assert pin_tries() == 1
    r = tb("pin", "change", pins=["000000", "111111"])  # last try: refused without a yes
    assert r.returncode == 3 and "Only one PIN try is left" in r.stderr
    assert pin_tries() == 1
    r = tb("pin", "change", "--yes", pins=["000000", "111111"])
    assert r.returncode == 7, r.stderr
    assert "blocked" in r.stderr and "pin unblock" in r.stderr
    r = tb("pin", "status")
    assert "PIN: blocked" in r.stdout
    assert tb("pin", "change", pins=["24681357", "111111"]).returncode == 7  # nothing sent once blocked

    child = spawn("pin", "unblock")
    answer(child, "PUK: ", "12345678", "13572468")
    assert finish(child, "PIN unblocked and set.") == 0
    assert piv_tool("-a", "verify-pin", "-P", "13572468").returncode == 0
    assert pin_tries() == 3


def test_new_pin_typed_differently_twice_is_asked_again(card):
    child = spawn("pin", "change")
    answer(child, "Current PIN: ", "123456", "111111", repeat="111112")
    child.expect("differ")
    child.expect("New PIN: ")
    child.sendline("111111")
    child.expect("Repeat new PIN: ")
    child.sendline("111111")
    assert finish(child, "PIN changed.") == 0
    assert piv_tool("-a", "verify-pin", "-P", "111111").returncode == 0


@pytest.mark.parametrize("new,reason", [
    ("12345", "shorter than 6"), ("123456789", "longer than 8"), ("12a456", "digits only"),
    ("", "empty"), ("123456", "same as the current"),
])
def test_policy_violations_send_nothing(card, new, reason):
    r = tb("pin", "change", pins=["123456", new])
    assert r.returncode == 9, r.stderr
    assert reason in r.stderr
    assert pin_tries() == 3


def test_current_pin_over_8_bytes_is_not_sent(card):
    r = tb("pin", "change", pins=["123456789", "111111"])
    assert r.returncode == 9 and "longer than 8" in r.stderr
    assert pin_tries() == 3


@pytest.mark.parametrize("card", piv_params(), indirect=True)
def test_puk_change_and_wrong_puk(card):
    r = tb("puk", "change", pins=["00000000", "87654321"])
    assert r.returncode == 6 and "Wrong PUK; 2 tries left" in r.stderr
    assert tb("puk", "change", pins=["12345678", "87654321"]).returncode == 0
    assert piv_tool("-a", "unblock-pin", "-P", "87654321", "-N", "111111").returncode == 0


@pytest.mark.parametrize("card", piv_params(), indirect=True)
def test_unblock_with_a_wrong_puk(card):
    """A blocked PIN and a wrong PUK: the PUK's tries are counted down and said, the PIN stays blocked and nothing
    else changes; the right PUK then unblocks it (yubico-piv-tool checks the new PIN)."""
    for _ in range(3):
        assert piv_tool("-a", "verify-pin", "-P", "000000").returncode != 0
    assert "PIN: blocked" in tb("pin", "status").stdout
    r = tb("pin", "unblock", pins=["00000000", "13572468"])
    assert r.returncode == 6 and "Wrong PUK; 2 tries left" in r.stderr, (r.returncode, r.stderr)
    status = tb("pin", "status").stdout
    assert "PIN: blocked" in status and "PUK: 2 tries left" in status, status
    assert tb("pin", "unblock", pins=["12345678", "13572468"]).returncode == 0
    assert piv_tool("-a", "verify-pin", "-P", "13572468").returncode == 0
    assert pin_tries() == 3


def test_several_tokens_without_a_terminal_are_listed(cards):
    a, b = cards(0, 5000100), cards(1, 5000101)
    r = tb("pin", "status")
    assert r.returncode == 4
    assert a.id in r.stderr and b.id in r.stderr and "--token" in r.stderr
    r = tb("pin", "status", "--token", b.id, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["token"] == b.id
    r = tb("pin", "status", "--token", "piv-1")
    assert r.returncode == 4 and "No token piv-1" in r.stderr


def test_several_tokens_on_a_terminal_asks_which(cards):
    cards(0, 5000200)
    b = cards(1, 5000201)
    child = spawn("pin", "status")
    child.expect(r"Which one \[1-2\]\? ")
    child.sendline("2")
    child.expect(re.escape(b.id))
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_reader_without_card():
    r = tb("pin", "status")
    assert r.returncode == 4
    assert "Virtual PCD 00 00: no card" in r.stderr


def test_card_that_is_not_piv(cards):
    cards(args=["--without-piv"])
    r = tb("pin", "status")
    assert r.returncode == 11 and "not a PIV card" in r.stderr


def test_no_pcscd():
    r = tb("tokens", env={"PCSCLITE_CSOCK_NAME": "/nonexistent/pcscd.comm"})
    assert r.returncode == 5
    assert "pcscd" in r.stderr and "not running" in r.stderr


def test_no_reader():
    r = subprocess.run([str(ROOT / "Tools" / "with-pcscd"), "--no-readers", "--", TOKENBRIDGE, "pin", "status"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 4, r.stderr
    assert "No smart-card reader found" in r.stderr


def test_card_removed_at_the_prompt(card):
    child = spawn("pin", "change")
    child.expect("Current PIN: ")
    card.remove()
    answer(child, "", "123456", "111111")
    assert finish(child, "removed") == 10


@pytest.mark.parametrize("card", piv_params(), indirect=True)
def test_wrong_management_key_changes_nothing(card):
    r_fd, w_fd = os.pipe()
    os.write(w_fd, b"11" * 24 + b"\n")
    os.close(w_fd)
    r = subprocess.run([TOKENBRIDGE, "key", "generate", "--slot", "9a", "--management-key-fd", str(r_fd)],
                       capture_output=True, text=True, pass_fds=(r_fd,), stdin=subprocess.DEVNULL)
    os.close(r_fd)
    assert r.returncode == 12, r.stderr
    assert "management key was not accepted" in r.stderr
    r = tb("key", "public", "--slot", "9a")
    assert r.returncode == 11 and "holds no key" in r.stderr


def test_management_key_from_fd(card):
    r_fd, w_fd = os.pipe()
    os.write(w_fd, b"010203040506070801020304050607080102030405060708\n")
    os.close(w_fd)
    r = subprocess.run([TOKENBRIDGE, "key", "generate", "--slot", "9d", "--management-key-fd", str(r_fd)],
                       capture_output=True, text=True, pass_fds=(r_fd,), stdin=subprocess.DEVNULL)
    os.close(r_fd)
    assert r.returncode == 0, r.stderr
    assert "BEGIN PUBLIC KEY" in r.stdout


@pytest.mark.parametrize("card", piv_params(), indirect=True)
def test_occupied_slot_needs_force(card):
    first = tb("key", "generate", "--slot", "9c")
    assert first.returncode == 0, first.stderr
    r = tb("key", "generate", "--slot", "9c")
    assert r.returncode == 13 and "already holds a key" in r.stderr and "--force" in r.stderr
    assert tb("key", "public", "--slot", "9c").stdout.strip() == first.stdout.strip()
    forced = tb("key", "generate", "--slot", "9c", "--force")
    assert forced.returncode == 0
    assert forced.stdout != first.stdout


def test_occupied_slot_on_a_terminal_asks(card):
    assert tb("key", "generate", "--slot", "82").returncode == 0
    child = spawn("key", "generate", "--slot", "82")
    child.expect("already holds a key")
    child.sendline("no")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 13


@pytest.mark.parametrize("card", piv_params(), indirect=True)
def test_sign_is_verified_by_openssl(card, tmp_path):
    pub = tmp_path / "pub.pem"
    r = tb("key", "generate", "--slot", "9a")
    assert r.returncode == 0
    pub.write_text(r.stdout)
    msg = tmp_path / "msg"
    msg.write_bytes(b"TokenBridge signs this")
    sig = tmp_path / "sig.der"
    r = tb("key", "sign", "--slot", "9a", "--input", str(msg), "--output", str(sig), pins=["000000", "123456"])
    assert r.returncode == 0, r.stderr
    assert "Wrong PIN; 2 tries left" in r.stderr
    v = subprocess.run(["openssl", "dgst", "-sha256", "-verify", str(pub), "-signature", str(sig), str(msg)],
                       capture_output=True, text=True)
    assert v.returncode == 0 and "Verified OK" in v.stdout
    assert pin_tries() == 3


def test_trace_redacts_secrets(card):
    r = tb("pin", "change", "--trace", pins=["123456", "24680246"])
    assert r.returncode == 0, r.stderr
    assert "apdu > 00 24 00 80 Lc=16 <redacted 16 bytes>" in r.stderr
    for secret in ("31 32 33 34 35 36", "32 34 36 38 30 32 34 36"):
        assert secret not in r.stderr


def test_pin_change_selects_once_and_uses_at_most_five_apdus(card):
    r = tb("pin", "change", "--trace", pins=["123456", "24680246"])
    assert r.returncode == 0
    sent = [l for l in r.stderr.splitlines() if l.startswith("apdu > ")]
    # One transaction for the whole command: SELECT, GET VERSION, GET SERIAL, the tries, the change.
    # (Before, the change had its own transaction after discovery's: 3 after its SELECT, 7 in all.)
    assert sum(l.startswith("apdu > 00 A4 04 00") for l in sent) == 1, sent
    assert len(sent) <= 5, sent
    assert sent[-1].startswith("apdu > 00 24 00 80")


def test_pin_is_never_an_argument(card):
    r = tb("pin", "change", "--pin", "123456")
    assert r.returncode == 64


def test_pin_fd_must_be_open(card):
    r = subprocess.run([TOKENBRIDGE, "pin", "change", "--pin-fd", "57"], capture_output=True, text=True)
    assert r.returncode == 64 and "not an open file descriptor" in r.stderr


def test_no_terminal_and_no_pin_fd(card):
    r = tb("pin", "change")
    assert r.returncode == 64 and "--pin-fd" in r.stderr


def test_json_errors(card):
    r = tb("pin", "change", "--json", pins=["000000", "111111"])
    assert r.returncode == 6
    assert json.loads(r.stdout) == {"error": "Wrong PIN; 2 tries left.", "exitCode": "6"}


def test_exit_codes_are_documented_in_readme():
    readme = (ROOT / "README.md").read_text()
    listed = subprocess.run([TOKENBRIDGE, "exit-codes"], capture_output=True, text=True).stdout
    for line in listed.splitlines():
        code, meaning = line.split("\t")
        assert re.search(rf"^\| {code} \| ", readme, re.M), f"exit code {code} ({meaning}) missing from README"


def test_ctrl_c_while_a_script_feeds_the_pin(card):
    """A --pin-fd command puts nothing on the terminal: its Ctrl-C handler is the plain first stage, which says so
    and ends with 130 (as a shell does)."""
    r, w = os.pipe()  # the PIN never comes
    p = subprocess.Popen([TOKENBRIDGE, "pin", "change", "--pin-fd", str(r)], pass_fds=(r,), stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.close(r)
    try:
        # It names the token and its tries, then waits for the PIN.
        ready, _, _ = select.select([p.stderr], [], [], 20)
        assert ready, "no word from tokenbridge"
        assert "tries left" in p.stderr.readline()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=10)
    finally:
        os.close(w)
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, (p.returncode, err)
    assert "tokenbridge: interrupted" in err and "Traceback" not in err
    assert pin_tries() == 3  # no PIN was sent


def test_piv_commands_from_a_script_start_no_thread(card, tmp_path):
    """A PIV command that prompts nowhere starts two threads at most: the one that bounds pcscd's first answer
    (`PCSCEstablish`: a pcscd with a full listen backlog would otherwise hang the command in connect) and the
    watchdog of every later PC/SC call (`PCSCCall`: a pcscd that stops after answering once), which lives as long
    as the process, never one per call. No dispatch source for Ctrl-C (it needs one only to put a terminal back or
    cancel a touch), no FIDO2 probe when no key can be there (a thread and libdispatch's start-up were a tenth of a
    PIN change). strace counts the clone calls."""
    trace = tmp_path / "clone.trace"
    for args, pins in [(["pin", "status"], None), (["pin", "change"], ["123456", "24681357"]),
                       (["pin", "change"], ["24681357", "123456"])]:
        fds, extra = (), []
        if pins:
            r, w = os.pipe()
            os.write(w, "".join(p + "\n" for p in pins).encode())
            os.close(w)
            fds, extra = (r,), ["--pin-fd", str(r)]
        p = subprocess.run(["strace", "-f", "-qq", "-e", "trace=clone,clone3,vfork,fork", "-o", str(trace),
                            TOKENBRIDGE, *args, *extra], pass_fds=fds, capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=60)
        for fd in fds:
            os.close(fd)
        assert p.returncode == 0, p.stderr
        # One line per clone: strace -f splits a call another thread interrupts into "<unfinished ...>" and
        # "<... clone3 resumed>" lines; only the one with the result counts.
        clones = [line for line in trace.read_text().splitlines() if "clone" in line and "<unfinished" not in line]
        assert len(clones) <= 2, (args, trace.read_text())
