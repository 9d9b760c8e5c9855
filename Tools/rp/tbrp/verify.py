"""Cryptographic checks of a UAF assertion: public keys (raw X9.62, DER SPKI), ECDSA P-256 signatures (raw, DER),
attestation certificates issued by a trust anchor, and the metadata statements a registration must match."""
import base64
import json
import sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from .wire import Refused


def public_key(encoding, data):
    try:
        if encoding == 0x0100:
            return ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), data)
        if encoding == 0x0101:
            return serialization.load_der_public_key(data)
    except Exception:
        raise Refused(1494, "public key does not parse")
    raise Refused(1494, f"public key encoding {encoding:#x} not accepted")


def verify(key, alg, signature, message):
    if alg == 0x0001:  # raw r||s
        if len(signature) != 64:
            raise Refused(1498, "raw signature is not 64 bytes")
        signature = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
    elif alg != 0x0002:
        raise Refused(1495, f"signature algorithm {alg:#x} not accepted")
    try:
        key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError):
        raise Refused(1498, "signature does not verify")


# Metadata Statement v3.0 strings of the registry values a UAF statement names (FIDO Registry of Predefined Values
# §3.6.1-3.6.2, UAF Registry §4.1; FIDO's registry.js): written here from the registry, not taken from the client.
ALG_SIGN = {"secp256r1_ecdsa_sha256_raw": 0x0001, "secp256r1_ecdsa_sha256_der": 0x0002,
            "rsassa_pss_sha256_raw": 0x0003, "rsassa_pss_sha256_der": 0x0004, "secp256k1_ecdsa_sha256_raw": 0x0005,
            "secp256k1_ecdsa_sha256_der": 0x0006, "sm2_sm3_raw": 0x0007, "rsa_emsa_pkcs1_sha256_raw": 0x0008,
            "rsa_emsa_pkcs1_sha256_der": 0x0009, "rsassa_pss_sha384_raw": 0x000A, "rsassa_pss_sha512_raw": 0x000B,
            "rsassa_pkcsv15_sha256_raw": 0x000C, "rsassa_pkcsv15_sha384_raw": 0x000D,
            "rsassa_pkcsv15_sha512_raw": 0x000E, "rsassa_pkcsv15_sha1_raw": 0x000F,
            "secp384r1_ecdsa_sha384_raw": 0x0010, "secp521r1_ecdsa_sha512_raw": 0x0011,
            "ed25519_eddsa_sha512_raw": 0x0012, "ed448_eddsa_sha512_raw": 0x0013}
ALG_KEY = {"ecc_x962_raw": 0x0100, "ecc_x962_der": 0x0101, "rsa_2048_raw": 0x0102, "rsa_2048_der": 0x0103,
           "cose": 0x0104}
ATTESTATION = {"basic_full": 0x3E07, "basic_surrogate": 0x3E08, "ecdaa": 0x3E09, "attca": 0x3E0A, "none": 0x3E0B,
               "anonca": 0x3E0C}


def load_metadata(paths):
    """{AAID upper-cased: what a registration is checked against} from statement files (one statement or a JSON
    array of them; v3.0 string form or the UAF 1.1 numeric form). A file the RP cannot use stops it at start."""
    out = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            for s in data if isinstance(data, list) else [data]:
                aaid = s["aaid"].upper()
                if s.get("protocolFamily", "uaf") != "uaf":
                    raise ValueError(f"{aaid}: protocolFamily is not uaf")
                if aaid in out:
                    raise ValueError(f"{aaid}: a second statement")
                if "authenticationAlgorithms" in s:  # v3.0
                    algs = {ALG_SIGN[a] for a in s["authenticationAlgorithms"]}
                    keys = {ALG_KEY[k] for k in s["publicKeyAlgAndEncodings"]}
                    attestation = {ATTESTATION[a] for a in s["attestationTypes"]}
                else:  # UAF 1.1
                    algs, keys = {int(s["authenticationAlgorithm"])}, {int(s["publicKeyAlgAndEncoding"])}
                    attestation = {int(a) for a in s["attestationTypes"]}
                roots = [base64.b64decode(r, validate=True) for r in s["attestationRootCertificates"]]
                out[aaid] = dict(algs=algs, keys=keys, attestation=attestation, roots=roots,
                                 version=int(s["authenticatorVersion"]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            sys.exit(f"tokenbridge-rp: --metadata {path}: not a usable UAF metadata statement ({e!r})")
    return out


def issued_by(cert, issuer):
    """`issuer`'s key signed `cert` (ECDSA, or RSA PKCS#1 v1.5). Names are not compared: the tests' attestation
    certificates are made with `openssl x509 -new -key <root key>`, whose issuer name is their own subject."""
    from cryptography.hazmat.primitives.asymmetric import padding, rsa
    key = issuer.public_key()
    try:
        if isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))
        elif isinstance(key, rsa.RSAPublicKey):
            key.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(), cert.signature_hash_algorithm)
        else:
            return False
        return True
    except (InvalidSignature, ValueError, TypeError):
        return False
