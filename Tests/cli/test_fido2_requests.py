"""What each FIDO2 command sends, now that every exchange goes through libfido2: libfido2's open sends CTAPHID_INIT and
authenticatorGetInfo itself and keeps what it needs of the answer (PIN protocol, PIN token kind, credential management);
a command that shows or checks what getInfo says (minPINLength, forcePINChange, the AAGUID, extensions) asks once more
with `fido_cbor_info` (libfido2 1.12 does not hand out the answer of its open). Counted from the virtual key's own
request log (`virtual-token fido2 --log-requests`), not from anything TokenBridge says. Counts only, no time."""
import json

from conftest import TOKENBRIDGE  # noqa: F401
from test_round_trips import CLIENT_PIN, GET_ASSERTION, GET_INFO, INIT, fido_key  # noqa: F401 (fixture)
from test_uaf import home, rp, tb  # noqa: F401 (fixtures)


def test_fido2_pin_change_requests(fido_key):  # noqa: F811
    env, requests = fido_key
    # INIT and getInfo (inside libfido2's open), getInfo (the PIN policy: minPINLength, checked before anything is
    # sent), getPINRetries (the tries before the PIN is tried: house rule), getKeyAgreement and changePIN; the same
    # for a second change, which sees the first one's PIN.
    for old, new in (("11111111", "22222222"), ("22222222", "33333333")):
        requests.mark()
        r = tb(env, "pin", "change", pins=[old, new])
        assert r.returncode == 0, r.stderr
        assert requests.since() == [INIT, GET_INFO, GET_INFO, CLIENT_PIN, CLIENT_PIN, CLIENT_PIN]


def test_tokens_with_a_key_requests(fido_key):  # noqa: F811
    env, requests = fido_key
    requests.mark()
    r = tb(env, "tokens", "--json")
    assert r.returncode == 0, r.stderr
    listed = json.loads(r.stdout)
    keys = [t for t in listed if t.get("kind") == "fido2"] if isinstance(listed, list) else listed
    assert keys, r.stdout
    # The open (INIT, getInfo); what the listing shows of getInfo (extensions, minPINLength, AAGUID) from a getInfo
    # of ours; the tries (getPINRetries); the virtual key has no built-in UV, so no getUVRetries.
    assert requests.since() == [INIT, GET_INFO, GET_INFO, CLIENT_PIN]
    assert "hmac-secret" in r.stdout


def test_fido2_info_requests(fido_key):  # noqa: F811
    env, requests = fido_key
    requests.mark()
    r = tb(env, "fido2", "info", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["aaguid"] and "hmac-secret" in report["extensions"], report
    # The tries discovery read serve the report too.
    assert requests.since() == [INIT, GET_INFO, GET_INFO, CLIENT_PIN]
    assert report["pinRetries"] == 8, report


def test_fido2_registration_requests(fido_key, rp):  # noqa: F811
    env, requests = fido_key
    server = rp()
    requests.mark()
    r = tb(env, "register", "--username", "alice", "--server", server.url, pins=["11111111"])
    assert r.returncode == 0, r.stderr
    assert requests.since().count(GET_INFO) == 2, requests.since()
