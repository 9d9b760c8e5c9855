"""Selection with reasons: with several tokens, the list shows for each whether this hardware supports it and whether
the server's policy accepts it, and why not; username-less authentication lists the accounts the same way; --json
carries the same fields. Two virtual PIV cards and a virtual FIDO2 key; the reference RP accepts only the PIV AAID
(--aaid)."""
import json
import os
import sys

import pexpect
import pytest

from conftest import TOKENBRIDGE, piv_tool, tb as tb_raw
from fido2_conn import Key
from test_uaf import RelyingParty

PIV_ONLY = "AAID 7B1D#0002 is not among 7B1D#0001"


@pytest.fixture
def setup(cards, tmp_path):
    first, second = cards(0), cards(1)
    key = Key(tmp_path)
    server = RelyingParty(tmp_path, ["--aaid", "7B1D#0001"])
    home = {"TOKENBRIDGE_VIRTUAL_FIDO": key.sock, "XDG_DATA_HOME": str(tmp_path / "d"),
            "XDG_CONFIG_HOME": str(tmp_path / "c")}
    yield first, second, key, server, home
    server.stop()
    key.stop()


def fido2_id(home):
    data = json.loads(tb_raw("tokens", "--json", env=home).stdout)
    return next(t["id"] for t in data if t["kind"] == "fido2")


def spawn(args, home):
    child = pexpect.spawn(TOKENBRIDGE, args, encoding="utf-8", timeout=30, env=dict(os.environ, **home))
    child.logfile_read = sys.stdout
    return child


def test_registration_lists_every_token_with_reasons(setup):
    first, second, key, server, home = setup
    fid = fido2_id(home)
    r = tb_raw("register", "--username", "alice", "--server", server.url, env=home, pins=["123456"])
    assert r.returncode == 4, r.stderr
    lines = r.stderr.splitlines()
    assert lines[0] == "tokenbridge: Several tokens can be registered; choose one with --token ID:"
    assert f"  {first.id}  YubiKey 5.4.3  7B1D#0001  (usable)" in lines
    assert f"  {second.id}  YubiKey 5.4.3  7B1D#0001  (usable)" in lines
    fido_line = next(l for l in lines if l.startswith(f"  {fid}  "))
    assert fido_line.endswith(f"7B1D#0002  (not accepted by the server's policy: {PIV_ONLY})")
    assert server.registrations() == []

    out = json.loads(tb_raw("register", "--json", "--username", "alice", "--server", server.url, env=home,
                            pins=["123456"]).stdout)
    assert out["exitCode"] == "4"
    rows = {c["token"]: c for c in out["candidates"]}
    assert set(rows) == {first.id, second.id, fid}
    assert rows[first.id]["isSupportedByHardware"] and rows[first.id]["isPolicyCompliant"]
    assert rows[first.id]["reasons"] == []
    f = rows[fid]
    assert f["isSupportedByHardware"] is True and f["isPolicyCompliant"] is False
    assert f["policyReasons"] == [PIV_ONLY] and f["reasons"] == [PIV_ONLY] and f["aaid"] == "7B1D#0002"


def test_no_fit_names_what_was_seen_and_not_usable(cards, tmp_path):
    """A card without PIV, an empty reader and a key the server's policy refuses: "no token fits" names all
    three and why, rather than only the key it could ask."""
    plain = cards(0, args=("--without-piv",))
    key = Key(tmp_path)
    server = RelyingParty(tmp_path, ["--aaid", "7B1D#0001"])
    home = {"TOKENBRIDGE_VIRTUAL_FIDO": key.sock, "XDG_DATA_HOME": str(tmp_path / "d"),
            "XDG_CONFIG_HOME": str(tmp_path / "c")}
    try:
        r = tb_raw("register", "--username", "alice", "--server", server.url, env=home, pins=["123456"])
        assert r.returncode == 22, r.stderr
        lines = r.stderr.splitlines()
        assert lines[0] == "tokenbridge: No token here fits the server's policy."
        assert f"  {plain.reader}: not a PIV card" in lines
        assert "  Virtual PCD 00 01: no card in this reader" in lines
        assert any(l.startswith("  fido2-") and l.endswith(PIV_ONLY) for l in lines)
        assert server.registrations() == []
    finally:
        server.stop()
        key.stop()


def test_blocked_pin_is_not_supported_by_this_hardware(setup):
    first, second, key, server, home = setup
    for _ in range(3):
        piv_tool("-a", "verify-pin", "-P", "999999", reader=second.reader)
    # Only the first card can serve: no question, it is used.
    r = tb_raw("register", "--json", "--username", "alice", "--server", server.url, env=home, pins=["123456"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert [x["aaid"] for x in server.registrations()] == ["7B1D#0001"]
    rows = json.loads(tb_raw("authenticators", "--json", env=home).stdout)
    assert [x["token"] for x in rows] == [first.id]


def test_terminal_choice_shows_reasons_and_refuses_an_unusable_token(setup):
    first, second, key, server, home = setup
    fid = fido2_id(home)
    child = spawn(["register", "--username", "alice", "--server", server.url], home)
    child.expect("Several tokens can be registered:")
    child.expect(r"Which one \[1-3\]\? ")
    numbers = {}
    for line in child.before.splitlines():
        for tid in (first.id, second.id, fid):
            if f") {tid}  " in line:
                numbers[tid] = line.strip().split(")")[0]
                if tid == fid:
                    assert line.endswith(f"(not accepted by the server's policy: {PIV_ONLY})")
                else:
                    assert line.endswith("7B1D#0001  (usable)")
    assert len(numbers) == 3
    child.sendline(numbers[fid])  # not usable: asked again
    child.expect(r"Which one \[1-3\]\? ")
    child.sendline(numbers[second.id])
    child.expect("PIN to ")
    child.sendline("123456")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    rows = json.loads(tb_raw("authenticators", "--json", env=home).stdout)
    assert [x["token"] for x in rows] == [second.id]


def test_username_less_authentication_lists_accounts(setup):
    first, second, key, server, home = setup
    for card, user in ((first, "alice"), (second, "bob")):
        r = tb_raw("register", "--token", card.id, "--username", user, "--server", server.url, env=home,
                   pins=["123456"])
        assert r.returncode == 0, r.stderr
    for _ in range(3):
        piv_tool("-a", "verify-pin", "-P", "999999", reader=second.reader)
    # bob's card is blocked: alice alone can sign in, without a question.
    r = tb_raw("authenticate", "--server", server.url, env=home, pins=["123456"])
    assert r.returncode == 0, r.stderr
    assert "alice" in r.stdout

    third = tb_raw("register", "--token", first.id, "--username", "carol", "--server", server.url, env=home,
                   pins=["123456"])
    assert third.returncode == 0, third.stderr
    r = tb_raw("authenticate", "--json", "--server", server.url, env=home, pins=["123456"])
    out = json.loads(r.stdout)
    assert out["exitCode"] == "4", r.stdout
    assert out["error"].startswith("Several accounts can sign in; name one with --username")
    rows = {c["username"]: c for c in out["candidates"]}
    assert set(rows) == {"alice", "bob", "carol"}
    assert rows["alice"]["token"] == first.id and rows["alice"]["keyID"]
    assert rows["bob"]["isSupportedByHardware"] is False and rows["bob"]["isPolicyCompliant"] is True
    assert rows["bob"]["hardwareReasons"] == ["PIN blocked (tokenbridge pin unblock)"]

    child = spawn(["authenticate", "--server", server.url], home)
    child.expect("Several accounts can sign in:")
    child.expect(r"Which one \[1-3\]\? ")
    listing = child.before
    assert (f"bob  on {second.id}  YubiKey 5.4.3  7B1D#0001  (not supported by this hardware: PIN blocked "
            "(tokenbridge pin unblock))") in listing
    assert f"alice  on {first.id}  YubiKey 5.4.3  7B1D#0001  (usable)" in listing
    number = next(l.strip().split(")")[0] for l in listing.splitlines() if "carol  on " in l)
    child.sendline(number)
    child.expect("PIN to ")
    child.sendline("123456")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_a_lone_blocked_token_still_says_how_to_unblock(card, tmp_path):
    """Nothing else could serve: the blocked PIN is reported as such (exit 7, pin unblock), not as 'no token
    fits'."""
    server = RelyingParty(tmp_path)
    home = {"XDG_DATA_HOME": str(tmp_path / "d"), "XDG_CONFIG_HOME": str(tmp_path / "c")}
    try:
        for _ in range(3):
            piv_tool("-a", "verify-pin", "-P", "999999")
        r = tb_raw("register", "--username", "alice", "--server", server.url, env=home, pins=["123456"])
        assert r.returncode == 7, r.stderr
        assert "pin unblock" in r.stderr
        assert server.registrations() == []
    finally:
        server.stop()
