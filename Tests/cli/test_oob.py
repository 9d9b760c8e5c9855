"""Out-of-band payloads: QR text, links, x-callback-urls and push JSON, redeemed at the reference RP and run with the
virtual card; the SDK's error kinds as distinct exit codes. A registration and an authentication through a QR and a link
run on every token (implementations.UAF_TOKENS); the payload handling the other tests check does not depend on the
token, so they run on the virtual card only."""
import base64
import json
import os

import pytest

from conftest import pin_tries
from test_uaf import home, rp, tb, uaf_token  # noqa: F401 (fixtures)


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def payload(server, op, **context):
    name = {"Reg": "registration", "Auth": "authentication", "Dereg": "deregistration"}[op]
    t = server.post(f"/nevisfido/token/create/{name}", {"op": op, "context": json.dumps(context)})
    return {"nma_data": {"token": t["token"], "redeem_url": t["redeem_url"], "data": "Sign in to \x1b[31mBank"},
            "nma_data_content_type": "application/json", "nma_data_version": "1"}


def qr(p):
    return b64u(json.dumps(p).encode())


def test_qr_registration_then_link_authentication(uaf_token, rp, home):
    server = rp()
    r = tb(home, "oob", "--qr-text", qr(payload(server, "Reg", username="alice")), "--yes", pins=["123456"])
    assert r.returncode == 0, r.stderr
    assert "Registered alice" in r.stdout and "About to run a registration at " + server.url in r.stderr
    assert "\\u{1B}[31mBank" in r.stderr and "\x1b" not in r.stderr  # the payload's data, escaped
    assert [(x["username"], x["aaid"]) for x in server.registrations()] == [("alice", uaf_token.aaid)]
    link = "https://app.example/open?dispatchTokenResponse=" + qr(payload(server, "Auth", username="alice"))
    r = tb(home, "oob", link, "--yes", pins=["123456"])
    assert r.returncode == 0, r.stderr
    assert "Authenticated as alice" in r.stdout


def test_decode_only_does_nothing(card, rp, home):
    server = rp()
    p = payload(server, "Reg", username="alice")
    r = tb(home, "oob", "--qr-text", qr(p), "--decode-only", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["operation"] == "registration" and d["server"] == server.url
    # Nothing was redeemed: the token still works.
    assert tb(home, "oob", "--qr-text", qr(p), "--yes", pins=["123456"]).returncode == 0


def test_a_token_is_used_once_and_unknown_tokens_are_named(card, rp, home):
    server = rp()
    p = payload(server, "Reg", username="alice")
    assert tb(home, "oob", "--qr-text", qr(p), "--yes", pins=["123456"]).returncode == 0
    r = tb(home, "oob", "--qr-text", qr(p), "--yes", pins=["123456"])
    assert r.returncode == 29 and "used already" in r.stderr, r.stderr
    p["nma_data"]["token"] = "never-issued"
    r = tb(home, "oob", "--qr-text", qr(p), "--yes", pins=["123456"])
    assert r.returncode == 28 and "expired or unknown" in r.stderr, r.stderr


@pytest.mark.parametrize("bad,code,text", [
    ("not base64url!", 31, "not base64url"),
    (b64u(b"[1,2]"), 31, "not a JSON object"),
    # Not a compact JWE at all: malformed (31), not "encrypted for another device's key" (30).
    (b64u(json.dumps({"nma_data": "eyJhbGciOi...", "nma_data_content_type": "application/jose"}).encode()), 31,
     "the encrypted nma_data is not a compact JWE"),
    (b64u(json.dumps({"nma_data": {"token": "t", "redeem_url": "http://bank.example/nevisfido/token/redeem/"
                                                              "registration"}}).encode()), 31, "not https"),
    (b64u(json.dumps({"nma_data": {"token": "t", "redeem_url": "https://bank.example/elsewhere"}}).encode()), 31,
     "redeem_url"),
])
def test_malformed_payloads_have_their_own_codes(home, bad, code, text):
    r = tb(home, "oob", "--qr-text", bad, "--yes")
    assert r.returncode == code, r.stderr
    assert text in r.stderr and "Traceback" not in r.stderr


def test_the_operation_must_match_the_redeem_url(card, rp, home):
    server = rp()
    assert tb(home, "oob", "--qr-text", qr(payload(server, "Reg", username="alice")), "--yes",
              pins=["123456"]).returncode == 0
    p = payload(server, "Dereg", username="alice")
    p["nma_data"]["redeem_url"] = p["nma_data"]["redeem_url"].replace("deregistration", "registration")
    r = tb(home, "oob", "--qr-text", qr(p), "--yes", pins=["123456"])
    assert r.returncode == 24 and "deregistration message" in r.stderr, r.stderr
    # Nothing was processed here: the local registration and the key are still there.
    assert [x["username"] for x in json.loads(tb(home, "authenticators", "--json").stdout)] == ["alice"]


def test_confirmation_is_needed(card, rp, home):
    server = rp()
    p = payload(server, "Reg", username="alice")
    r = tb(home, "oob", "--qr-text", qr(p), pins=["123456"])
    assert r.returncode == 3 and "Not confirmed" in r.stderr, r.stderr
    assert server.registrations() == [] and pin_tries() == 3


def test_x_callback_targets_only_from_the_allow_list(card, rp, home):
    server = rp()
    os.makedirs(home["XDG_CONFIG_HOME"] + "/tokenbridge", exist_ok=True)
    with open(home["XDG_CONFIG_HOME"] + "/tokenbridge/config.json", "w") as f:
        json.dump({"callbackAllowList": ["bankapp:", "https://bank.example"]}, f)
    enc = qr(payload(server, "Reg", username="alice"))
    url = (f"tokenbridge://x-callback-url/oob?dispatchTokenResponse={enc}&x-success=bankapp://done"
           "&x-error=https://evil.example/steal")
    r = tb(home, "oob", url, "--yes", "--no-open", pins=["123456"])
    assert r.returncode == 0, r.stderr
    assert "Callback: bankapp://done" in r.stderr
    enc = qr(payload(server, "Reg", username="bob"))
    url = (f"tokenbridge://x-callback-url/oob?dispatchTokenResponse={enc}&x-success=https://evil.example/x"
           "&x-error=https://evil.example/y")
    r = tb(home, "oob", url, "--yes", "--no-open", pins=["123456"])
    assert r.returncode == 0, r.stderr
    assert "Not opened: https://evil.example/x is not on the callback allow-list" in r.stderr
