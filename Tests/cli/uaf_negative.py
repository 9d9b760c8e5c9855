"""UAF request messages that break a rule of FIDO UAF Protocol v1.1, or that no authenticator here can serve, each
made from a real request of the reference RP with one change, and the FIDO UAF Client API ErrorCode (and the CLI
exit code, README "Exit codes") every front end must answer them with. The D-Bus service (CheckPolicy,
ProcessUAFOperation) and `tokenbridge uaf process` are both tried with this one table (test_uaf_conformance.py).
"""
import base64
import json

PROTOCOL_ERROR, UNSUPPORTED_VERSION, NO_SUITABLE_AUTHENTICATOR, INVALID_TRANSACTION_CONTENT, UNKNOWN = 6, 4, 5, 13, 0xFF
# The CLI's exit codes for them (README, "Exit codes").
EXIT = {PROTOCOL_ERROR: 24, UNSUPPORTED_VERSION: 24, UNKNOWN: 24, NO_SUITABLE_AUTHENTICATOR: 22,
        INVALID_TRANSACTION_CONTENT: 24}


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def _edit(message, change):
    requests = json.loads(message)
    for r in requests:
        change(r)
    return json.dumps(requests)


def _policy(accepted, disallowed=None):
    def change(r):
        r["policy"] = {"accepted": accepted} | ({"disallowed": disallowed} if disallowed is not None else {})
    return change


def _exts(*exts):
    def change(r):
        r["header"]["exts"] = list(exts)
    return change


def _tx(*entries):
    def change(r):
        r["transaction"] = list(entries)
    return change


def _set(key, value):
    def change(r):
        r[key] = value
    return change


def _upv(minor):
    def change(r):
        r["header"]["upv"] = {"major": 1, "minor": minor}
    return change


CRITICAL = {"id": "example.critical", "data": "", "fail_if_unknown": True}
PNG = {"width": 320, "height": 240, "bitDepth": 8, "colorType": 6, "compression": 0, "filter": 0, "interlace": 0}
KEY = b64u(bytes(range(32)))

# (name, operation, change, expected ErrorCode, refused before any token is asked). Each names the rule it breaks.
CASES = [
    # Protocol §3.1.12: "accepted … MUST NOT be empty"; the client never widens the server's policy.
    ("empty accepted", "Reg", _policy([]), PROTOCOL_ERROR, True),
    ("empty accepted set", "Reg", _policy([[]]), PROTOCOL_ERROR, True),
    # §3.1.11: aaid MUST NOT be combined with userVerification (and the other capability fields).
    ("aaid with userVerification", "Reg", _policy([[{"aaid": ["7B1D#0001"], "userVerification": 4}]]),
     PROTOCOL_ERROR, True),
    # §3.1.11: without aaid, authenticationAlgorithms and assertionSchemes MUST be provided.
    ("criteria without aaid or algorithms", "Reg", _policy([[{"userVerification": 4}]]), PROTOCOL_ERROR, True),
    ("malformed disallowed", "Reg", _policy([[{"aaid": ["7B1D#0001"], "keyIDs": [KEY]}]], [{"keyIDs": [KEY]}]),
     PROTOCOL_ERROR, True),
    # §3.1.10: an unknown extension with fail_if_unknown MUST result in an error (the authenticator's: UNKNOWN).
    ("critical extension (Reg)", "Reg", _exts(CRITICAL), UNKNOWN, True),
    ("critical extension (Auth)", "Auth", _exts(CRITICAL), UNKNOWN, True),
    ("critical extension (Dereg)", "Dereg", _exts(CRITICAL), UNKNOWN, True),
    # §3.5.1: content base64url without padding; text/plain at most 200 characters; two content types only.
    ("padded transaction", "Auth", _tx({"contentType": "text/plain", "content": b64u(b"Pay 1") + "="}),
     PROTOCOL_ERROR, True),
    ("transaction of 201 characters", "Auth", _tx({"contentType": "text/plain", "content": b64u(b"x" * 201)}),
     PROTOCOL_ERROR, True),
    ("transaction as text/html", "Auth", _tx({"contentType": "text/html", "content": b64u(b"<b>Pay</b>")}),
     PROTOCOL_ERROR, True),
    ("image without characteristics", "Auth", _tx({"contentType": "image/png", "content": b64u(b"\x89PNG")}),
     PROTOCOL_ERROR, True),
    # §3.6.3: a deregistration names at least one authenticator; §3.6.4.2: "every key" only as the one entry.
    ("dereg of nothing", "Dereg", _set("authenticators", []), PROTOCOL_ERROR, True),
    ("dereg of everything and a key", "Dereg",
     _set("authenticators", [{"aaid": "", "keyID": ""}, {"aaid": "7B1D#0001", "keyID": KEY}]), PROTOCOL_ERROR, True),
    # §3: base64url without padding.
    ("padded challenge", "Reg", lambda r: r.update(challenge=r["challenge"] + "="), PROTOCOL_ERROR, True),
    # §3.3: no request in a version spoken.
    ("UAF 1.7 only", "Reg", _upv(7), UNSUPPORTED_VERSION, True),
    # Well-formed, and nothing here fits: the tokens are listed, nobody is asked.
    ("policy of another AAID", "Reg", _policy([[{"aaid": ["F1D0#0001"]}]]), NO_SUITABLE_AUTHENTICATOR, False),
    ("policy needing a fingerprint", "Reg",
     _policy([[{"userVerification": 2, "authenticationAlgorithms": [2], "assertionSchemes": ["UAFV1TLV"]}]]),
     NO_SUITABLE_AUTHENTICATOR, False),
    # Well-formed image/png only: this client cannot show it (Protocol §3.4.6.2.1, CANNOT_RENDER).
    ("image only", "Auth", _tx({"contentType": "image/png", "content": b64u(b"\x89PNG"), "tcDisplayPNGCharacteristics": PNG}),
     INVALID_TRANSACTION_CONTENT, False),
]


def _dereg(reg):
    """A deregistration of one key, with the header (appID, upv) of the RP's registration request `reg` (the RP
    issues a deregistration only for what it has registered, and forgets it when it does)."""
    [r] = json.loads(reg)
    header = {k: v for k, v in r["header"].items() if k != "serverData"} | {"op": "Dereg"}
    return json.dumps([{"header": header, "authenticators": [{"aaid": "7B1D#0001", "keyID": KEY}]}])


def negative_messages(request):
    """[(name, message, code, early)] from `request(op)`, a function giving a fresh RP request message of `op`
    ("Reg" or "Auth"; a deregistration is made from a registration's header)."""
    base = {"Reg": lambda: request("Reg"), "Auth": lambda: request("Auth"), "Dereg": lambda: _dereg(request("Reg"))}
    return [(name, _edit(base[op](), change), code, early) for name, op, change, code, early in CASES]


# Positive controls: the same edits that keep every rule are accepted (CheckPolicy answers 0 for a registration).
def accepted_variants(reg):
    ignorable = {"id": "example.optional", "data": b64u(b"x"), "fail_if_unknown": False}
    criteria = {"authenticationAlgorithms": [2], "assertionSchemes": ["UAFV1TLV"]}
    return [("ignorable extension", _edit(reg, _exts(ignorable))),
            ("criteria by algorithm and scheme", _edit(reg, _policy([[criteria]]))),
            ("aaid with attachmentHint", _edit(reg, _policy([[{"aaid": ["7B1D#0001", "7B1D#0002"], "attachmentHint": 2}]])))]
