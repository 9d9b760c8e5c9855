"""What a dispatcher answers: a QR code PNG, and a payload encrypted for a dispatch target's `encryptionKey` (compact
JWE, ECDH-ES + A256GCM, as the client's Sources/TokenBridge/OutOfBand/PayloadEncryption.swift expects)."""
import hashlib
import json
import secrets
import struct

from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .wire import b64u, unb64u


def qr_png(text):
    """A PNG of a QR code holding `text` (segno, from PyPI: Tools/setup installs it)."""
    import io
    import segno
    out = io.BytesIO()
    segno.make_qr(text, error="m").save(out, kind="png", scale=6, border=4)
    return out.getvalue()


def jwe_encrypt(jwk_json, plaintext):
    """Compact JWE for a P-256 JWK: alg ECDH-ES (direct), enc A256GCM, Concat KDF (RFC 7518 4.6.2) over SHA-256."""
    jwk = json.loads(jwk_json)
    recipient = ec.EllipticCurvePublicNumbers(int.from_bytes(unb64u(jwk["x"]), "big"),
                                              int.from_bytes(unb64u(jwk["y"]), "big"), ec.SECP256R1()).public_key()
    eph = ec.generate_private_key(ec.SECP256R1())
    n = eph.public_key().public_numbers()
    header = {"alg": "ECDH-ES", "enc": "A256GCM", "cty": "application/json",
              "epk": {"kty": "EC", "crv": "P-256", "x": b64u(n.x.to_bytes(32, "big")),
                      "y": b64u(n.y.to_bytes(32, "big"))}}
    protected = b64u(json.dumps(header, separators=(",", ":")).encode())
    z = eph.exchange(ec.ECDH(), recipient)
    alg_id = b"A256GCM"
    kdf_in = (struct.pack(">I", 1) + z + struct.pack(">I", len(alg_id)) + alg_id + struct.pack(">I", 0)
              + struct.pack(">I", 0) + struct.pack(">I", 256))
    key = hashlib.sha256(kdf_in).digest()
    iv = secrets.token_bytes(12)
    sealed = AESGCM(key).encrypt(iv, plaintext, protected.encode())
    return ".".join([protected, "", b64u(iv), b64u(sealed[:-16]), b64u(sealed[-16:])])
