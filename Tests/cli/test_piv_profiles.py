"""Every PIV flow on cards that are not YubiKeys: the virtual card's profiles stand for JavaCard applets and government
cards (no GET METADATA/VERSION/SERIAL, other empty-slot words, 5 PIN tries) and for a YubiKey-like card that answers GET
METADATA of an empty slot with 9000 and no algorithm. The same tests run on each profile; what a profile cannot tell (a
PUK's tries, a public key without a certificate) must be said, not crash. yubico-piv-tool and OpenSC's pkcs11-tool,
which we did not write, check that the generic card is a card they accept."""
import json
import subprocess

import pytest

from conftest import make_card, piv_tool, tb as tb_raw
from test_uaf import RelyingParty

PKCS11 = "/usr/lib/x86_64-linux-gnu/opensc-pkcs11.so"

# name -> (virtual-token arguments, PIN tries of a new card, answers GET METADATA)
PROFILES = {
    "yubikey": ([], 3, True),
    "generic": (["--profile", "generic"], 5, False),
    "generic-6A80": (["--profile", "generic", "--empty-slot-status", "6A80"], 5, False),
    "generic-6A82": (["--profile", "generic", "--empty-slot-status", "6A82"], 5, False),
    "generic-6A86": (["--profile", "generic", "--empty-slot-status", "6A86"], 5, False),
    "generic-8-tries": (["--profile", "generic", "--pin-tries", "8"], 8, False),
    "metadata-9000-when-empty": (["--empty-metadata-without-algorithm"], 3, True),
}
MAIN = ["yubikey", "generic", "metadata-9000-when-empty"]


@pytest.fixture
def home(tmp_path):
    return {"XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "config")}


@pytest.fixture
def profile_card(request, cards):
    args, tries, metadata = PROFILES[request.param]
    c = cards(args=args)
    c.tries, c.metadata, c.profile = tries, metadata, request.param
    return c


def tb(home, *args, **kw):
    return tb_raw(*args, env=home, **kw)


@pytest.mark.parametrize("profile_card", MAIN + ["generic-8-tries"], indirect=True)
def test_pin_status_shows_both_counts_or_says_why_not(profile_card, home):
    c = profile_card
    r = tb(home, "pin", "status")
    assert r.returncode == 0, r.stderr
    if c.metadata:
        assert f"PIN: {c.tries} tries left (of {c.tries})" in r.stdout, r.stdout
        assert "PUK: 3 tries left (of 3)" in r.stdout, r.stdout  # as `tokens` shows it
    else:
        assert f"PIN: {c.tries} tries left\n" in r.stdout, r.stdout
        assert "PUK: not told by this card (it has no GET METADATA" in r.stdout, r.stdout
        assert r.stdout.startswith("PIV card (piv-"), r.stdout  # not named a YubiKey
    j = json.loads(tb(home, "pin", "status", "--json").stdout)
    assert j["pin"]["retriesLeft"] == c.tries
    assert j["puk"].get("retriesLeft") == (3 if c.metadata else None)
    listed = json.loads(tb(home, "tokens", "--json").stdout)
    assert listed[0]["puk"] == j["puk"]


@pytest.mark.parametrize("profile_card", MAIN, indirect=True)
def test_pin_change_block_and_unblock_with_the_id_the_message_names(profile_card, home, tmp_path):
    c = profile_card
    r = tb(home, "pin", "change", pins=["123456", "24681357"])
    assert r.returncode == 0, r.stderr
    for _ in range(c.tries):
        piv_tool("-a", "verify-pin", "-P", "000000")
    msg = tmp_path / "msg"
    msg.write_bytes(b"x")
    r = tb(home, "key", "sign", "--slot", "9a", "--input", str(msg), "--output", str(tmp_path / "sig"),
           pins=["24681357"])
    assert r.returncode == 7, r.stderr
    # The message names the token; that very id must work with --token (it did not: exit 4).
    suggested = r.stderr.split("tokenbridge pin unblock --token ", 1)[1].split()[0]
    r = tb(home, "pin", "unblock", "--token", suggested, pins=["12345678", "13572468"])
    assert r.returncode == 0, r.stderr
    assert r.stdout == "PIN unblocked and set.\n"
    r = tb(home, "pin", "status", "--token", suggested, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["pin"]["retriesLeft"] == c.tries
    assert piv_tool("-a", "verify-pin", "-P", "13572468").returncode == 0


def certify(tmp_path, pub, slot):
    """A certificate for `pub` (signed by a throwaway key), imported into `slot` by yubico-piv-tool."""
    ca, cert = tmp_path / "ca.key", tmp_path / "cert.pem"
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(ca)], check=True)
    subprocess.run(["openssl", "x509", "-new", "-subj", "/CN=tokenbridge test", "-key", str(ca), "-force_pubkey",
                    str(pub), "-days", "2", "-out", str(cert)], check=True, capture_output=True)
    r = piv_tool("-a", "import-certificate", "-s", slot, "-i", str(cert))
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("profile_card", list(PROFILES), indirect=True)
def test_key_generate_public_and_sign(profile_card, home, tmp_path):
    c = profile_card
    pub = tmp_path / "pub.pem"
    r = tb(home, "key", "generate", "--slot", "9a")
    assert r.returncode == 0, r.stderr  # was exit 1, "GET METADATA could not be read"
    pub.write_text(r.stdout)
    r = tb(home, "key", "public", "--slot", "9a")
    if c.metadata:
        assert r.returncode == 0, r.stderr
    else:
        # Standard PIV cannot read a key back: said plainly, with the way out.
        assert r.returncode == 11, r.stderr
        assert "no GET METADATA" in r.stderr and "key generate" in r.stderr, r.stderr
        certify(tmp_path, pub, "9a")  # a certificate in the slot tells the key
        r = tb(home, "key", "public", "--slot", "9a")
        assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == pub.read_text().strip()

    msg, sig = tmp_path / "msg", tmp_path / "sig.der"
    msg.write_bytes(b"TokenBridge signs this on a " + c.profile.encode())
    r = tb(home, "key", "sign", "--slot", "9a", "--input", str(msg), "--output", str(sig),
           pins=["000000", "123456"])
    assert r.returncode == 0, r.stderr
    assert f"Wrong PIN; {c.tries - 1} tries left" in r.stderr
    v = subprocess.run(["openssl", "dgst", "-sha256", "-verify", str(pub), "-signature", str(sig), str(msg)],
                       capture_output=True, text=True)
    assert v.returncode == 0 and "Verified OK" in v.stdout, v.stdout + v.stderr

    # An empty slot, in whichever word the card says it.
    r = tb(home, "key", "sign", "--slot", "9c", "--input", str(msg), "--output", str(sig), pins=["123456"])
    assert r.returncode == 11 and "Slot 9C holds no key." in r.stderr, r.stderr
    r = tb(home, "key", "public", "--slot", "9c")
    assert r.returncode == 11, r.stderr
    assert ("Slot 9C holds no key." if c.metadata else "no GET METADATA") in r.stderr, r.stderr


@pytest.mark.parametrize("profile_card", MAIN, indirect=True)
def test_uaf_register_and_authenticate(profile_card, home, tmp_path):
    server = RelyingParty(tmp_path)
    try:
        r = tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"])
        assert r.returncode == 0, r.stderr
        assert [x["username"] for x in server.registrations()] == ["alice"]
        r = tb(home, "authenticate", "--username", "alice", "--server", server.url, pins=["000000", "123456"])
        assert r.returncode == 0, r.stderr
        assert f"Wrong PIN; {profile_card.tries - 1} tries left" in r.stderr and "Authenticated as alice" in r.stdout
        # A second registration takes another slot: the first one is known to hold our key.
        r = tb(home, "register", "--username", "bob", "--server", server.url, pins=["123456"])
        assert r.returncode == 0, r.stderr
        slots = sorted(a["slot"] for a in json.loads(tb(home, "authenticators", "--json").stdout))
        assert slots == ["82", "83"], slots
        r = tb(home, "deregister", "--username", "alice", "--server", server.url)
        assert r.returncode == 0, r.stderr
        assert [x["username"] for x in server.registrations()] == ["bob"]
    finally:
        server.stop()


@pytest.mark.parametrize("profile_card", ["generic"], indirect=True)
def test_peers_accept_the_generic_card(profile_card, home, tmp_path):
    r = piv_tool("-a", "status")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PIN tries left:\t5" in r.stdout, r.stdout
    assert "CHUID:\t30" in r.stdout, r.stdout
    pub = tmp_path / "pub.pem"
    r = piv_tool("-a", "generate", "-s", "9d", "-A", "ECCP256", "-o", str(pub))
    assert r.returncode == 0, r.stdout + r.stderr
    certify(tmp_path, pub, "9d")
    r = tb(home, "key", "public", "--slot", "9d")
    assert r.returncode == 0 and r.stdout.strip() == pub.read_text().strip(), r.stderr
    objs = subprocess.run(["pkcs11-tool", "--module", PKCS11, "-O"], capture_output=True, text=True, timeout=60)
    assert objs.returncode == 0, objs.stderr
    assert "Certificate for Key Management" in objs.stdout, objs.stdout + objs.stderr


@pytest.mark.parametrize("impl", ["virtual", "canokey"])
def test_key_sign_on_an_empty_slot_answered_6985_says_the_slot_holds_no_key(impl, request, cards, monkeypatch, home,
                                                                             tmp_path):
    """CanoKey's PIV answers GENERAL AUTHENTICATE on an empty slot 6985 (before any PIN check): the slot holds no key
    (exit 11), as every other card's word says, not "unexpected error" (exit 1). The virtual card answers the same
    with --empty-slot-status 6985; CanoKey itself when Tools/third-party has built it."""
    if impl == "virtual":
        cards(args=["--empty-slot-status", "6985"])
    else:
        make_card("canokey", request, cards, monkeypatch)
    msg = tmp_path / "msg"
    msg.write_bytes(b"TokenBridge signs this")
    r = tb(home, "key", "sign", "--slot", "9c", "--input", str(msg), "--output", str(tmp_path / "sig"),
           pins=["123456"])
    assert r.returncode == 11 and "Slot 9C holds no key." in r.stderr, r.stderr
