"""The shapes the FIDO UAF Application API and Transport Binding v1.1 gives discover()'s answer (§3.1.2
DiscoveryData, §3.1.3 Authenticator), checked field by field, and the values TokenBridge's two kinds of
authenticator must carry (the FIDO Registry's constants; the same facts as `tokenbridge metadata`)."""

# Authenticator dictionary: every field and its WebIDL type (required unless marked optional).
AUTHENTICATOR_FIELDS = {
    "title": str, "aaid": str, "description": str, "supportedUAFVersions": list, "assertionScheme": str,
    "authenticationAlgorithm": int, "attestationTypes": list, "userVerification": int, "keyProtection": int,
    "matcherProtection": int, "attachmentHint": int, "isSecondFactorOnly": bool, "tcDisplay": int,
    "icon": str, "supportedExtensionIDs": list,
}
AUTHENTICATOR_OPTIONAL = {"tcDisplayContentType": str, "tcDisplayPNGCharacteristics": list}

USER_VERIFY_PASSCODE, USER_VERIFY_PRESENCE, USER_VERIFY_ALL = 0x4, 0x1, 0x400
KEY_PROTECTION_SOFTWARE, KEY_PROTECTION_HARDWARE, KEY_PROTECTION_SECURE_ELEMENT = 0x1, 0x2, 0x8
MATCHER_PROTECTION_ON_CHIP = 0x4
ATTACHMENT_HINT_EXTERNAL, ATTACHMENT_HINT_WIRED = 0x2, 0x4
TRANSACTION_CONFIRMATION_DISPLAY_ANY = 0x1
ALG_SIGN_SECP256R1_ECDSA_SHA256_DER = 0x2
TAG_ATTESTATION_BASIC_FULL, TAG_ATTESTATION_BASIC_SURROGATE = 0x3E07, 0x3E08

_COMMON = {
    "supportedUAFVersions": [(1, 0), (1, 1)], "assertionScheme": "UAFV1TLV",
    "authenticationAlgorithm": ALG_SIGN_SECP256R1_ECDSA_SHA256_DER,
    "attestationTypes": [TAG_ATTESTATION_BASIC_SURROGATE], "matcherProtection": MATCHER_PROTECTION_ON_CHIP,
    "attachmentHint": ATTACHMENT_HINT_EXTERNAL | ATTACHMENT_HINT_WIRED, "isSecondFactorOnly": False,
    "tcDisplay": TRANSACTION_CONFIRMATION_DISPLAY_ANY, "tcDisplayContentType": "text/plain",
    "supportedExtensionIDs": [],
}
PIV_AUTHENTICATOR = _COMMON | {
    "aaid": "7B1D#0001",
    "description": "TokenBridge: a PIV smart card as a UAF authenticator (P-256 key generated on the card, "
                   "PIN verified by the card)",
    "userVerification": USER_VERIFY_PASSCODE,
    "keyProtection": KEY_PROTECTION_HARDWARE | KEY_PROTECTION_SECURE_ELEMENT,
}
FIDO2_AUTHENTICATOR = _COMMON | {
    "aaid": "7B1D#0002",
    "description": "TokenBridge: a FIDO2 security key as a UAF authenticator (key derived from hmac-secret, "
                   "PIN and touch on the key)",
    "userVerification": USER_VERIFY_PASSCODE | USER_VERIFY_PRESENCE | USER_VERIFY_ALL,
    "keyProtection": KEY_PROTECTION_SOFTWARE,
}


def _version(v):
    """A Version: {major, minor} in JSON, (major, minor) over D-Bus."""
    if isinstance(v, dict):
        assert set(v) == {"major", "minor"}, v
        v = (v["major"], v["minor"])
    assert isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(x, int) and 0 <= x <= 0xFFFF for x in v), v
    return tuple(v)


def check_authenticator(a):
    """Every required field with its type, nothing the dictionary does not define; the icon a PNG data: URL."""
    assert set(AUTHENTICATOR_FIELDS) <= set(a), set(AUTHENTICATOR_FIELDS) - set(a)
    assert set(a) <= set(AUTHENTICATOR_FIELDS) | set(AUTHENTICATOR_OPTIONAL), set(a) - set(AUTHENTICATOR_FIELDS)
    for k, t in (AUTHENTICATOR_FIELDS | AUTHENTICATOR_OPTIONAL).items():
        if k in a:
            assert isinstance(a[k], t) and (t is not int or not isinstance(a[k], bool)), (k, a[k])
    a["supportedUAFVersions"] = [_version(v) for v in a["supportedUAFVersions"]]
    assert a["icon"].startswith("data:image/png;base64,")
    assert (a["tcDisplay"] == 0) == ("tcDisplayContentType" not in a)


def check_discovery_data(d):
    """DiscoveryData: exactly its four fields, clientVersion a Version, each authenticator checked (in place:
    versions become tuples so a JSON answer compares with a D-Bus one)."""
    assert set(d) == {"supportedUAFVersions", "clientVendor", "clientVersion", "availableAuthenticators"}, set(d)
    d["supportedUAFVersions"] = [_version(v) for v in d["supportedUAFVersions"]]
    assert d["supportedUAFVersions"] == [(1, 0), (1, 1)]
    assert d["clientVendor"] == "TokenBridge"
    d["clientVersion"] = _version(d["clientVersion"])
    for a in d["availableAuthenticators"]:
        check_authenticator(a)
