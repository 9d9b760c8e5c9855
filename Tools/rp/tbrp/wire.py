"""The UAF wire: TLV tags and parsing, base64url as UAF writes it, and the two refusals (a UAF status code, or an
HTTP status of the device and dispatch-target services)."""
import base64
import re
import struct

UAF = "application/fido+uaf"
TAG = dict(REG_ASSERTION=0x3E01, AUTH_ASSERTION=0x3E02, KRD=0x3E03, SIGNED_DATA=0x3E04, SIGNATURE=0x2E06,
           ATT_FULL=0x3E07, ATT_SURROGATE=0x3E08, KEYID=0x2E09, FCH=0x2E0A, AAID=0x2E0B, PUB_KEY=0x2E0C,
           COUNTERS=0x2E0D, INFO=0x2E0E, NONCE=0x2E0F, TCH=0x2E10)


class DeviceRefused(Exception):
    """A device or dispatch-target service refusal: an HTTP status (401, 404, 422…)."""
    def __init__(self, status, why):
        super().__init__(why)
        self.status, self.why = status, why


class Refused(Exception):
    def __init__(self, code, why):
        super().__init__(why)
        self.code, self.why = code, why


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def unb64u(s):
    try:
        return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    except Exception:
        raise Refused(1498, "not base64url")


B64U = re.compile(r"[A-Za-z0-9_-]*")


def unb64u_strict(s):
    """base64url as UAF writes it (Protocol v1.1 §3): the URL-safe alphabet only, no padding, a length an encoding
    has. Python's decoder alone skips characters outside the alphabet and takes padding."""
    if not isinstance(s, str) or not B64U.fullmatch(s) or len(s) % 4 == 1:
        raise Refused(1498, "not base64url without padding")
    return unb64u(s)


def tlv(data, depth=0):
    """Parses little-endian UAF TLV into [(tag, value_bytes, children_or_None)]."""
    if depth > 8:
        raise Refused(1498, "TLV nested too deep")
    out, i = [], 0
    while i < len(data):
        if len(data) - i < 4:
            raise Refused(1498, "truncated TLV header")
        tag, length = struct.unpack_from("<HH", data, i)
        value = data[i + 4:i + 4 + length]
        if len(value) != length:
            raise Refused(1498, f"truncated TLV value of tag {tag:#x}")
        out.append((tag, value, tlv(value, depth + 1) if tag & 0x1000 else None))
        i += 4 + length
    return out


def field(elements, name, required=True):
    for tag, value, children in elements:
        if tag == TAG[name]:
            return (value, children)
    if required:
        raise Refused(1498, f"{name} missing")
    return (None, None)
