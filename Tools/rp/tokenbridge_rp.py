#!/usr/bin/env python3
"""tokenbridge-rp: a reference relying party speaking the nevisFIDO UAF endpoints (test fixture, not product).

Verifies for real, with its own TLV parser (independent of the client's Swift code): ECDSA P-256 signatures
(DER and raw), public keys (raw X9.62 and DER SPKI), FINAL_CHALLENGE_HASH, single-use expiring challenges,
appID and facet ID, policy AAIDs, growing counters and transaction content hashes. Loopback only by default.
With --metadata (FIDO metadata statements, v3.0 or the UAF 1.1 numeric form, as `tokenbridge metadata` prints them)
a registration must match its AAID's statement: signature algorithm, public key encoding, attestation type and
trust anchors, authenticatorVersion.
Also the out-of-band services: dispatch targets (create, query, modify with a JWS body, delete), dispatch tokens,
redeem, status, the device service (device credentials, pending operations), every device request checked for a
`Device-Signature` (ES256 compact JWS by the target's key; request id used once, creation time within a window).
Dispatches can come encrypted for the target's `encryptionKey` (`"encrypt": true` in the dispatch request: a
compact JWE, ECDH-ES + A256GCM, as the client's Sources/TokenBridge/OutOfBand/PayloadEncryption.swift expects),
and the QR dispatchers answer a PNG (base64) rendered with segno; `POST /_admin/qr {"text"}` renders any text.
See ../shared/specs/backend-contract.md (sections 1-3, 5, 6); the wire choices where it is silent are the client's
Sources/TokenBridge/DeviceInformation/DeviceWire.swift.
"""
import argparse
import base64
import hashlib
import json
import re
import os
import secrets
import sqlite3
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

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
              "epk": {"kty": "EC", "crv": "P-256", "x": b64u(n.x.to_bytes(32, "big")), "y": b64u(n.y.to_bytes(32, "big"))}}
    protected = b64u(json.dumps(header, separators=(",", ":")).encode())
    z = eph.exchange(ec.ECDH(), recipient)
    alg_id = b"A256GCM"
    kdf_in = (struct.pack(">I", 1) + z + struct.pack(">I", len(alg_id)) + alg_id + struct.pack(">I", 0)
              + struct.pack(">I", 0) + struct.pack(">I", 256))
    key = hashlib.sha256(kdf_in).digest()
    iv = secrets.token_bytes(12)
    sealed = AESGCM(key).encrypt(iv, plaintext, protected.encode())
    return ".".join([protected, "", b64u(iv), b64u(sealed[:-16]), b64u(sealed[-16:])])


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


class RP:
    def __init__(self, args):
        self.args = args
        # None: no statements loaded, every accepted AAID goes; else a registration needs its AAID's statement.
        self.statements = load_metadata(args.metadata) if args.metadata else None
        self.registered = []  # what each accepted registration's assertion said (GET /_admin/registration-facts)
        self.db = sqlite3.connect(args.db, check_same_thread=False)
        self.lock = threading.Lock()
        self.faults = []  # queued (status, delay) answers for tests
        self.registration_stalls = []  # seconds to wait after a registration was taken, before answering it
        self.device_faults = []  # the same, for the dispatch-target and device services only
        self.last_signature = None  # the last Device-Signature accepted (tests replay it)
        self.next_target_ids = []  # ids the next created dispatch targets get (tests: ids outside the unreserved set)
        self.db.executescript("""
            CREATE TABLE IF NOT EXISTS challenges(server_data TEXT PRIMARY KEY, op TEXT, username TEXT,
              challenge TEXT, expires REAL, used INTEGER, tx TEXT, upv TEXT, session TEXT);
            CREATE TABLE IF NOT EXISTS registrations(username TEXT, aaid TEXT, key_id TEXT, public_key BLOB,
              key_encoding INTEGER, counter INTEGER, device_id TEXT, PRIMARY KEY(aaid, key_id));
            CREATE TABLE IF NOT EXISTS tokens(token TEXT PRIMARY KEY, op TEXT, context TEXT, redeemed INTEGER,
              session TEXT, expires REAL, target_id TEXT, created REAL, channel TEXT, dispatch_info TEXT,
              payload TEXT);
            CREATE TABLE IF NOT EXISTS dispatch_targets(id TEXT PRIMARY KEY, ext_id TEXT, username TEXT, name TEXT,
              device_id TEXT, target TEXT, dispatcher TEXT, signature_key TEXT, encryption_key TEXT);
            CREATE TABLE IF NOT EXISTS seen_requests(request_id TEXT PRIMARY KEY, at REAL);
            CREATE TABLE IF NOT EXISTS sessions(id TEXT PRIMARY KEY, status TEXT, uaf_status INTEGER, username TEXT);
        """)

    @property
    def app_id(self):
        return self.args.app_id or f"{self.args.base_url}{self.args.app_id_path}"

    def sql(self, q, *a):
        with self.lock:
            cur = self.db.execute(q, a)
            self.db.commit()
            return cur.fetchall()

    # --- requests -----------------------------------------------------------------------------------
    def new_request(self, op, context, session=None):
        ctx = json.loads(context) if context else {}
        if not isinstance(ctx, dict):
            raise Refused(1400, "context is not a JSON object")
        username = ctx.get("username")
        upv = ctx.get("upv", "1.1")
        if upv not in ("1.0", "1.1"):
            raise Refused(1400, "unsupported upv")
        major, minor = map(int, upv.split("."))
        server_data = b64u(secrets.token_bytes(24))
        challenge = b64u(secrets.token_bytes(32))
        header = {"upv": {"major": major, "minor": minor}, "op": op, "appID": self.app_id, "serverData": server_data}
        aaids = self.args.aaid
        if op == "Reg":
            if not username:
                raise Refused(1400, "registration needs a username")
            req = {"header": header, "challenge": challenge, "username": username,
                   "policy": {"accepted": [[{"aaid": aaids}]]}}
        elif op == "Auth":
            criteria = {"aaid": aaids}
            if username:
                keys = [r[0] for r in self.sql("SELECT key_id FROM registrations WHERE username=?", username)]
                if not keys:
                    raise Refused(1401, "no registration for this user")
                criteria["keyIDs"] = keys
            req = {"header": header, "challenge": challenge, "policy": {"accepted": [[criteria]]}}
            if ctx.get("transaction") and len(ctx["transaction"]) > 200:
                raise Refused(1400, "a text/plain transaction is at most 200 characters (UAF Protocol v1.1 §3.5.1)")
            if ctx.get("transaction"):
                req["transaction"] = [{"contentType": "text/plain", "content": b64u(ctx["transaction"].encode())}]
        else:
            rows = self.sql("SELECT aaid, key_id FROM registrations WHERE username=?", username or "")
            if ctx.get("keyID"):
                rows = [r for r in rows if r[1] == ctx["keyID"]]
            if not rows:
                raise Refused(1404, "nothing registered to deregister")
            header.pop("serverData")
            req = {"header": header, "authenticators": [{"aaid": a, "keyID": k} for a, k in rows]}
            for a, k in rows:  # nevisFIDO forgets the credential when it issues the deregistration
                self.sql("DELETE FROM registrations WHERE aaid=? AND key_id=?", a, k)
            return {"statusCode": 1200, "uafRequest": json.dumps([req]), "op": op}
        self.sql("INSERT INTO challenges VALUES(?,?,?,?,?,0,?,?,?)", server_data, op, username, challenge,
                 time.time() + self.args.challenge_ttl, ctx.get("transaction"), upv, session)
        return {"statusCode": 1200, "uafRequest": json.dumps([req]), "op": op, "lifetimeMillis":
                int(self.args.challenge_ttl * 1000)}

    # --- responses ----------------------------------------------------------------------------------
    def check_response(self, op, body):
        try:
            responses = json.loads(body["uafResponse"])
            response = responses[0]
            header, fc_params, assertions = response["header"], response["fcParams"], response["assertions"]
        except Exception:
            raise Refused(1400, "uafResponse is not a UAF response message")
        if header.get("op") != op or len(responses) != 1 or len(assertions) != 1:
            raise Refused(1400, "wrong operation or number of assertions")
        rows = self.sql("SELECT op, username, challenge, expires, used, tx, upv, session FROM challenges "
                        "WHERE server_data=?", header.get("serverData", ""))
        if not rows:
            raise Refused(1491, "unknown serverData")
        c_op, username, challenge, expires, used, tx, upv, session = rows[0]
        self.sql("UPDATE challenges SET used=1 WHERE server_data=?", header["serverData"])
        if used or time.time() > expires or c_op != op:
            raise Refused(1491, "challenge used, expired or for another operation")
        if f'{header["upv"]["major"]}.{header["upv"]["minor"]}' != upv:
            raise Refused(1400, "protocol version differs from the request")
        try:
            fc = json.loads(unb64u_strict(fc_params))
        except Exception:
            raise Refused(1498, "fcParams is not base64url JSON")
        if fc.get("challenge") != challenge:
            raise Refused(1491, "challenge mismatch")
        if fc.get("appID") != self.app_id:
            raise Refused(1498, "appID mismatch")
        if fc.get("facetID") not in self.args.facet:
            raise Refused(1498, "facet ID not trusted")
        fch = hashlib.sha256(fc_params.encode()).digest()
        assertion = assertions[0]
        if assertion.get("assertionScheme") != "UAFV1TLV":
            raise Refused(1498, "assertion scheme")
        return username, fch, unb64u_strict(assertion["assertion"]), tx, session

    def register(self, body):
        username, fch, raw, _, session = self.check_response("Reg", body)
        try:
            device_id = json.loads(body.get("context") or "{}").get("deviceId")
        except (ValueError, AttributeError):
            device_id = None
        top = tlv(raw)
        if len(top) != 1 or top[0][0] != TAG["REG_ASSERTION"]:
            raise Refused(1498, "not a registration assertion")
        krd_bytes, krd = field(top[0][2], "KRD")
        aaid = field(krd, "AAID")[0].decode(errors="replace")
        if aaid not in self.args.aaid:
            raise Refused(1492, f"AAID {aaid} not accepted")
        statement = None
        if self.statements is not None:
            statement = self.statements.get(aaid.upper())
            if statement is None:
                raise Refused(1492, f"no metadata statement for AAID {aaid}")
        info = field(krd, "INFO")[0]
        if len(info) != 7:
            raise Refused(1498, "ASSERTION_INFO")
        version, mode, sig_alg, key_enc = struct.unpack("<HBHH", info)
        if statement is not None:
            if version < statement["version"]:
                raise Refused(1492, f"authenticatorVersion {version} is lower than the statement's "
                                    f"{statement['version']}")
            if sig_alg not in statement["algs"]:
                raise Refused(1495, f"signature algorithm {sig_alg:#x} is not in the metadata statement")
            if key_enc not in statement["keys"]:
                raise Refused(1494, f"public key encoding {key_enc:#x} is not in the metadata statement")
        if field(krd, "FCH")[0] != fch:
            raise Refused(1498, "final challenge hash mismatch")
        key_id = field(krd, "KEYID")[0]
        counters = field(krd, "COUNTERS")[0]
        if len(counters) != 8:
            raise Refused(1498, "COUNTERS")
        sign_counter, _ = struct.unpack("<II", counters)
        pub = field(krd, "PUB_KEY")[0]
        key = public_key(key_enc, pub)
        signed = struct.pack("<HH", TAG["KRD"], len(krd_bytes)) + krd_bytes
        att, att_children = field(top[0][2], "ATT_SURROGATE", required=False)
        facts = {"aaid": aaid, "authenticatorVersion": version, "authenticationAlgorithm": sig_alg,
                 "publicKeyAlgAndEncoding": key_enc,
                 "attestationType": TAG["ATT_SURROGATE"] if att is not None else TAG["ATT_FULL"]}
        if att is not None:
            if self.args.attestation_root:
                raise Refused(1496, "basic full attestation is required")
            if statement is not None and TAG["ATT_SURROGATE"] not in statement["attestation"]:
                raise Refused(1496, "surrogate attestation is not in the metadata statement")
            verify(key, sig_alg, field(att_children, "SIGNATURE")[0], signed)
        else:
            full, full_children = field(top[0][2], "ATT_FULL", required=False)
            if full is None:
                raise Refused(1496, "no attestation")
            if statement is not None and TAG["ATT_FULL"] not in statement["attestation"]:
                raise Refused(1496, "basic full attestation is not in the metadata statement")
            self.check_full_attestation(full_children, sig_alg, signed, statement)
        kid = b64u(key_id)
        if self.sql("SELECT 1 FROM registrations WHERE aaid=? AND key_id=?", aaid, kid):
            raise Refused(1498, "KeyID already registered")
        self.sql("INSERT INTO registrations VALUES(?,?,?,?,?,?,?)", username, aaid, kid, pub, key_enc, sign_counter,
                 device_id)
        with self.lock:
            self.registered.append(dict(facts, keyID=kid))
        self.finish(session, 1200, username)
        return {"statusCode": 1200, "description": f"registered {aaid} for {username}"}

    def check_full_attestation(self, children, sig_alg, signed, statement=None):
        """The attestation certificates (TAG_ATTESTATION_CERT, repeatable: the leaf first, then any intermediates)
        chain to a trust anchor: --attestation-root's, or one of the AAID's statement's attestationRootCertificates."""
        from cryptography import x509
        certs = [v for t, v, _ in children if t == 0x2E05]
        if not certs:
            raise Refused(1496, "basic full attestation without certificate")
        try:
            chain = [x509.load_der_x509_certificate(c) for c in certs]
        except ValueError:
            raise Refused(1496, "attestation certificate does not parse")
        verify(chain[0].public_key(), sig_alg, field(children, "SIGNATURE")[0], signed)
        anchors = []
        if self.args.attestation_root:
            with open(self.args.attestation_root, "rb") as f:
                anchors.append(x509.load_pem_x509_certificate(f.read()))
        for der in (statement or {}).get("roots", []):
            try:
                anchors.append(x509.load_der_x509_certificate(der))
            except ValueError:
                pass  # a root that does not parse vouches for nothing
        if not anchors:
            raise Refused(1496, "no attestation trust anchor configured")
        for child, parent in zip(chain, chain[1:]):
            if not issued_by(child, parent):
                raise Refused(1496, "attestation certificate chain is broken")
        if not any(chain[-1] == a or issued_by(chain[-1], a) for a in anchors):
            raise Refused(1496, "attestation certificate is not issued by the trust anchor")
        if self.args.verbose:
            sys.stderr.write("rp: basic full attestation verified\n")

    def authenticate(self, body):
        username, fch, raw, tx, session = self.check_response("Auth", body)
        top = tlv(raw)
        if len(top) != 1 or top[0][0] != TAG["AUTH_ASSERTION"]:
            raise Refused(1498, "not an authentication assertion")
        sd_bytes, sd = field(top[0][2], "SIGNED_DATA")
        aaid = field(sd, "AAID")[0].decode(errors="replace")
        kid = b64u(field(sd, "KEYID")[0])
        rows = self.sql("SELECT username, public_key, key_encoding, counter FROM registrations "
                        "WHERE aaid=? AND key_id=?", aaid, kid)
        if not rows:
            raise Refused(1481, "unknown KeyID")
        owner, pub, key_enc, counter = rows[0]
        if username and owner != username:
            raise Refused(1401, "KeyID belongs to another user")
        info = field(sd, "INFO")[0]
        if len(info) != 5:
            raise Refused(1498, "ASSERTION_INFO")
        _, mode, sig_alg = struct.unpack("<HBH", info)
        if field(sd, "FCH")[0] != fch:
            raise Refused(1498, "final challenge hash mismatch")
        if len(field(sd, "NONCE")[0]) < 8:
            raise Refused(1498, "authenticator nonce too short")
        tch = field(sd, "TCH")[0]
        expected = hashlib.sha256(tx.encode()).digest() if tx else b""
        if tch != expected:
            raise Refused(1498, "transaction content hash mismatch")
        if tx and mode != 2:
            raise Refused(1498, "transaction not confirmed as shown (mode 2)")
        new_counter = struct.unpack("<I", field(sd, "COUNTERS")[0])[0]
        signed = struct.pack("<HH", TAG["SIGNED_DATA"], len(sd_bytes)) + sd_bytes
        verify(public_key(key_enc, pub), sig_alg, field(top[0][2], "SIGNATURE")[0], signed)
        if not (new_counter > counter or (new_counter == 0 and counter == 0)):
            raise Refused(1498, "signature counter did not grow")
        self.sql("UPDATE registrations SET counter=? WHERE aaid=? AND key_id=?", new_counter, aaid, kid)
        self.finish(session, 1200, owner)
        return {"statusCode": 1200, "description": f"authenticated {owner}"}

    def finish(self, session, code, username):
        if session:
            self.sql("UPDATE sessions SET status=?, uaf_status=?, username=? WHERE id=?",
                     "succeeded" if code == 1200 else "failed", code, username, session)


    # --- out-of-band and device services ------------------------------------------------------------
    def token_expired(self, token):
        rows = self.sql("SELECT expires FROM tokens WHERE token=?", token)
        return bool(rows) and rows[0][0] is not None and time.time() > rows[0][0]

    def target(self, target_id):
        rows = self.sql("SELECT id, ext_id, username, name, device_id, target, dispatcher, signature_key, "
                        "encryption_key FROM dispatch_targets WHERE id=?", target_id)
        return dict(zip(("id", "extId", "username", "name", "deviceId", "target", "dispatcher", "signatureKey",
                         "encryptionKey"), rows[0])) if rows else None

    def check_jws(self, jws, device_id=None, target_id=None):
        """A compact ES256 JWS by a dispatch target's signature key: returns (payload, target) or raises
        DeviceRefused(404) for an unknown target (or one of another device), DeviceRefused(401) otherwise."""
        parts = (jws or "").split(".")
        if len(parts) != 3:
            raise DeviceRefused(401, "not a compact JWS")
        try:
            header = json.loads(unb64u(parts[0]))
            payload = json.loads(unb64u(parts[1]))
            signature = unb64u(parts[2])
        except (Refused, ValueError):
            raise DeviceRefused(401, "JWS parts are not base64url JSON")
        if not isinstance(header, dict) or header.get("alg") != "ES256" or not isinstance(payload, dict):
            raise DeviceRefused(401, "JWS alg must be ES256")
        t = self.target(str(payload.get("dispatchTargetId", "")))
        if t is None or (device_id is not None and t["deviceId"] != device_id):
            raise DeviceRefused(404, "unknown dispatch target (for this device)")
        if target_id is not None and t["id"] != target_id:
            raise DeviceRefused(401, "signed for another dispatch target")
        try:
            jwk = json.loads(t["signatureKey"])
            key = ec.EllipticCurvePublicNumbers(int.from_bytes(unb64u(jwk["x"]), "big"),
                                                int.from_bytes(unb64u(jwk["y"]), "big"),
                                                ec.SECP256R1()).public_key()
        except Exception:
            raise DeviceRefused(401, "the target's signature key is not a P-256 JWK")
        if len(signature) != 64:
            raise DeviceRefused(401, "ES256 signature is not 64 bytes")
        der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
        try:
            key.verify(der, f"{parts[0]}.{parts[1]}".encode(), ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            raise DeviceRefused(401, "signature does not verify")
        created = payload.get("creationTimeInEpochMillis")
        if not isinstance(created, int) or abs(time.time() * 1000 - created) > self.args.signature_window * 1000:
            raise DeviceRefused(401, "creation time outside the window")
        request_id = payload.get("requestId")
        if not isinstance(request_id, str) or not 1 <= len(request_id) <= 64:
            raise DeviceRefused(401, "requestId missing or longer than 64")
        with self.lock:
            self.db.execute("DELETE FROM seen_requests WHERE at < ?", (time.time() - 2 * self.args.signature_window,))
            try:
                self.db.execute("INSERT INTO seen_requests VALUES(?,?)", (request_id, time.time()))
                self.db.commit()
            except sqlite3.IntegrityError:
                raise DeviceRefused(401, "requestId replayed")
        self.last_signature = jws
        return payload, t

    def name_taken(self, username, name, other_than=None):
        rows = self.sql("SELECT id FROM dispatch_targets WHERE username=? AND name=?", username, name)
        return any(r[0] != other_than for r in rows)

    def device_answer(self, device_id):
        targets = self.sql("SELECT id, username, name, target, dispatcher FROM dispatch_targets WHERE device_id=? "
                           "ORDER BY id", device_id)
        creds = self.sql("SELECT aaid, key_id, username FROM registrations WHERE device_id=? ORDER BY key_id",
                         device_id)
        return {"deviceId": device_id,
                "dispatchTargets": [dict(zip(("id", "username", "name", "target", "dispatcher"), r)) for r in targets],
                "credentials": [dict(zip(("aaid", "keyId", "username"), r)) for r in creds]}

    def pending(self, device_id):
        now = time.time()
        rows = self.sql("SELECT t.session, t.created, t.channel, t.dispatch_info, t.payload FROM tokens t "
                        "JOIN dispatch_targets d ON d.id = t.target_id WHERE d.device_id=? AND t.redeemed=0 "
                        "AND t.expires > ? ORDER BY t.created", device_id, now)
        return {"operations": [{"id": r[0], "creationTimeInEpochMillis": int(r[1] * 1000), "dispatchChannel": r[2],
                                "dispatchInformation": r[3], "payload": json.loads(r[4])} for r in rows]}

    def dispatch(self, op_name, body):
        """Dispatch Token Service: a token for the target, its payload, and the dispatcher's answer."""
        op = {"registration": "Reg", "authentication": "Auth", "deregistration": "Dereg"}[op_name]
        t = self.target(str(body.get("dispatchTargetId", "")))
        if t is None:
            return {"dispatchResult": "dispatchTargetNotFound"}
        dispatcher = body.get("dispatcher") or t["dispatcher"]
        if dispatcher not in ("firebase-cloud-messaging", "link", "link-png-qr-code", "png-qr-code"):
            return {"dispatchResult": "dispatcherNotFound"}
        get = body.get("getUafRequest") or {}
        context = get.get("context")
        if isinstance(context, dict):
            context = json.dumps(context)
        token, session, now = b64u(secrets.token_bytes(16)), b64u(secrets.token_bytes(12)), time.time()
        nma = {"token": token, "redeem_url": f"{self.args.base_url}/nevisfido/token/redeem/{op_name}"}
        if body.get("data") is not None:
            nma["data"] = body["data"]
        payload = {"nma_data": nma, "nma_data_content_type": "application/json", "nma_data_version": "1"}
        if body.get("encrypt"):
            if not t.get("encryptionKey"):
                raise DeviceRefused(422, "the target has no encryptionKey")
            payload = {"nma_data": jwe_encrypt(t["encryptionKey"], json.dumps(nma).encode()),
                       "nma_data_content_type": "application/jose", "nma_data_version": "1"}
        self.sql("INSERT INTO tokens VALUES(?,?,?,0,?,?,?,?,?,?,?)", token, op, context, session,
                 now + self.args.token_ttl, t["id"], now, dispatcher, body.get("dispatchInformation"),
                 json.dumps(payload))
        self.sql("INSERT INTO sessions VALUES(?,?,NULL,NULL)", session, "tokenCreated")
        encoded = b64u(json.dumps(payload).encode())
        link = f"{self.args.link_base}?dispatchTokenResponse={encoded}"
        response = {"link": link, "link-png-qr-code": base64.b64encode(qr_png(link)).decode(),
                    "png-qr-code": base64.b64encode(qr_png(encoded)).decode()}.get(dispatcher, encoded)
        return {"token": token, "sessionId": session, "dispatchResult": "dispatched",
                "dispatcherInformation": {"name": dispatcher, "response": response}}


def segment(raw):
    """One path segment as the client meant it: percent-decoded once (UTF-8). A raw `/` means another path, and a raw
    `.`/`..` would have been resolved by any URL layer on the way: neither names a target or device."""
    if "/" in raw or raw in ("", ".", ".."):
        raise DeviceRefused(404, "no such path segment")
    return unquote(raw, errors="strict")


class Handler(BaseHTTPRequestHandler):
    rp: RP = None
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        if self.rp.args.verbose:
            sys.stderr.write("rp: " + fmt % args + "\n")

    def send(self, status, obj, ctype=UAF + ";charset=UTF-8"):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def path_is(self, *names):
        p = urlparse(self.path).path.rstrip("/")
        return p in ["/nevisfido" + n for n in names]

    def send_empty(self, status):
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def loopback_client(self):
        return self.client_address[0] in ("127.0.0.1", "::1", "::ffff:127.0.0.1")

    def do_PATCH(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length > 1 << 16:
            return self.send(413, {}, "application/json")
        if not self.device_route("PATCH", self.rfile.read(length)):
            self.send(404, {}, "application/json")

    def do_DELETE(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length > 1 << 16:
            return self.send(413, {}, "application/json")
        if not self.device_route("DELETE", self.rfile.read(length)):
            self.send(404, {}, "application/json")

    def device_route(self, method, raw):
        """The dispatch-target, dispatch-token and device services and their admin endpoints; True when handled."""
        url = urlparse(self.path)
        path, query = url.path.rstrip("/"), parse_qs(url.query)
        rp = self.rp
        if path.startswith("/_admin/"):
            return self.device_admin(method, path, raw)
        targets = "/nevisfido/token/dispatch/targets"
        ops = ("/nevisfido/token/dispatch/registration", "/nevisfido/token/dispatch/authentication",
               "/nevisfido/token/dispatch/deregistration")
        if not (path == targets or path.startswith(targets + "/") or path.startswith("/nevisfido/devices/")
                or path in ops):
            return False
        if rp.device_faults:
            fault = rp.device_faults.pop(0)
            if fault is not None:
                status, delay, _ = fault
                time.sleep(delay)
                self.send(status, {"error": "injected fault"}, "application/json")
                return True
        signature = self.headers.get("Device-Signature")
        try:
            if path in ops and method == "POST":
                if "application/json" not in self.headers.get("Accept", ""):
                    raise DeviceRefused(406, "Accept must be application/json")
                self.send(200, rp.dispatch(path.rsplit("/", 1)[1], json.loads(raw or b"{}")), "application/json")
            elif path == targets and method == "POST":
                if not self.headers.get("Content-Type", "").startswith("application/json"):
                    raise DeviceRefused(415, "Content-Type must be application/json;charset=UTF-8")
                if "application/json" not in self.headers.get("Accept", ""):
                    raise DeviceRefused(406, "Accept must be application/json")
                self.create_target(json.loads(raw or b"{}"))
            elif path == targets and method == "GET":
                user = query.get("username", [None])[0]
                if not user:
                    raise DeviceRefused(400, "username is required")
                rows = rp.sql("SELECT name, id, dispatcher FROM dispatch_targets WHERE username=?", user)
                if not rows:
                    raise DeviceRefused(404, "no dispatch target")
                self.send(200, {"dispatchTargets": [dict(zip(("name", "id", "dispatcher"), r)) for r in rows]},
                          "application/json")
            elif path.startswith(targets + "/") and method == "PATCH":
                target_id = segment(path[len(targets) + 1:])
                if not self.headers.get("Content-Type", "").startswith("application/jose"):
                    raise DeviceRefused(415, "Content-Type must be application/jose;charset=UTF-8")
                if rp.target(target_id) is None:
                    raise DeviceRefused(404, "unknown dispatch target")
                payload, t = rp.check_jws(raw.decode(errors="replace"), target_id=target_id)
                name = payload.get("name")
                if name is not None:
                    if not isinstance(name, str) or not name:
                        raise DeviceRefused(400, "name must be a non-empty string")
                    if rp.name_taken(t["username"], name, other_than=t["id"]):
                        raise DeviceRefused(422, "name already taken")
                    rp.sql("UPDATE dispatch_targets SET name=? WHERE id=?", name, t["id"])
                if payload.get("disablePush"):
                    rp.sql("UPDATE dispatch_targets SET target=NULL, dispatcher='link' WHERE id=?", t["id"])
                elif payload.get("target"):
                    rp.sql("UPDATE dispatch_targets SET target=?, dispatcher='firebase-cloud-messaging' WHERE id=?",
                           str(payload["target"]), t["id"])
                self.send_empty(204)
            elif path.startswith(targets + "/") and method == "DELETE":
                target_id = segment(path[len(targets) + 1:])
                if rp.target(target_id) is None:
                    raise DeviceRefused(404, "unknown dispatch target")
                rp.check_jws(signature, target_id=target_id)
                rp.sql("DELETE FROM dispatch_targets WHERE id=?", target_id)
                self.send_empty(204)
            elif path.startswith("/nevisfido/devices/credentials/") and method in ("GET", "DELETE"):
                device_id = segment(path[len("/nevisfido/devices/credentials/"):])
                rp.check_jws(signature, device_id=device_id)
                if method == "GET":
                    self.send(200, rp.device_answer(device_id), "application/json")
                else:
                    aaid, key_id = query.get("aaid", [""])[0], query.get("keyId", [""])[0]
                    if not rp.sql("SELECT 1 FROM registrations WHERE device_id=? AND aaid=? AND key_id=?",
                                  device_id, aaid, key_id):
                        raise DeviceRefused(404, "no such credential of this device")
                    rp.sql("DELETE FROM registrations WHERE device_id=? AND aaid=? AND key_id=?", device_id, aaid,
                           key_id)
                    self.send_empty(204)
            elif path.startswith("/nevisfido/devices/") and path.endswith("/operations") and method == "GET":
                device_id = segment(path[len("/nevisfido/devices/"):-len("/operations")])
                rp.check_jws(signature, device_id=device_id)
                self.send(200, rp.pending(device_id), "application/json")
            else:
                raise DeviceRefused(405, "method not allowed")
        except DeviceRefused as r:
            if rp.args.verbose:
                sys.stderr.write(f"rp: device service refused {r.status}: {r.why}\n")
            self.send(r.status, {"error": r.why}, "application/json")
        except (ValueError, KeyError, TypeError) as e:
            self.send(400, {"error": f"bad request: {type(e).__name__}"}, "application/json")
        return True

    def create_target(self, body):
        rp = self.rp
        username, name = body.get("username"), body.get("name")
        if not isinstance(username, str) or not username or not isinstance(name, str) or not name:
            raise DeviceRefused(400, "username and name are required")
        try:
            jwk = json.loads(body.get("signatureKey") or "")
            ec.EllipticCurvePublicNumbers(int.from_bytes(unb64u(jwk["x"]), "big"), int.from_bytes(unb64u(jwk["y"]),
                                          "big"), ec.SECP256R1()).public_key()
        except Exception:
            raise DeviceRefused(400, "signatureKey must be a P-256 JWK")
        target = body.get("target")
        dispatcher = body.get("dispatcher") or ("firebase-cloud-messaging" if target else "link")
        if dispatcher == "firebase-cloud-messaging" and not target:
            raise DeviceRefused(422, "firebase-cloud-messaging needs a target")
        if rp.name_taken(username, name):
            raise DeviceRefused(422, "name already taken")
        target_id = rp.next_target_ids.pop(0) if rp.next_target_ids else b64u(secrets.token_bytes(12))
        ext_id = b64u(secrets.token_bytes(12))
        rp.sql("INSERT INTO dispatch_targets VALUES(?,?,?,?,?,?,?,?,?)", target_id, ext_id, username, name,
               body.get("deviceId"), target, dispatcher, body.get("signatureKey"), body.get("encryptionKey"))
        self.send(201, {"id": target_id, "extId": ext_id}, "application/json")

    def device_admin(self, method, path, raw):
        """Test endpoints (loopback clients only): inspect targets, replay material, make each mismatch kind."""
        rp = self.rp
        if not self.loopback_client():
            self.send(403, {"error": "admin endpoints answer loopback clients only"}, "application/json")
            return True
        if path == "/_admin/targets" and method == "GET":
            rows = rp.sql("SELECT id, username, name, device_id, target, dispatcher, signature_key, encryption_key "
                          "FROM dispatch_targets ORDER BY id")
            self.send(200, [dict(zip(("id", "username", "name", "deviceId", "target", "dispatcher", "signatureKey",
                                      "encryptionKey"), r)) for r in rows], "application/json")
            return True
        if path == "/_admin/devices" and method == "GET":
            rows = rp.sql("SELECT username, aaid, key_id, device_id FROM registrations ORDER BY key_id")
            self.send(200, [dict(zip(("username", "aaid", "keyId", "deviceId"), r)) for r in rows], "application/json")
            return True
        if path == "/_admin/registration-facts" and method == "GET":  # ASSERTION_INFO and attestation, per registration
            with rp.lock:
                facts = list(rp.registered)
            self.send(200, facts, "application/json")
            return True
        if path == "/_admin/last-signature" and method == "GET":
            self.send(200, {"signature": rp.last_signature}, "application/json")
            return True
        if method != "POST":
            return False
        body = json.loads(raw or b"{}")
        if path == "/_admin/fault" and body.get("scope") == "device":
            rp.device_faults.extend([None] * body.get("skip", 0) + [(body.get("status", 500), body.get("delay", 0),
                                                                      None)] * body.get("count", 1))
            self.send(200, {}, "application/json")
            return True
        if path == "/_admin/next-target-ids":  # the ids the next created targets get, in order
            rp.next_target_ids.extend(body["ids"])
            self.send(200, {}, "application/json")
            return True
        if path == "/_admin/target-key":  # the server's copy of a target's signature key, replaced
            rp.sql("UPDATE dispatch_targets SET signature_key=? WHERE id=?", body["signatureKey"], body["id"])
            self.send(200, {}, "application/json")
            return True
        if path == "/_admin/expire":
            rp.sql("UPDATE tokens SET expires=0 WHERE session=?", body["sessionId"])
            self.send(200, {}, "application/json")
            return True
        if path != "/_admin/mismatch":
            return False
        kind, answer = body.get("kind"), {}
        if kind == "MissingAuthenticatorInMobileDevice":  # a credential the server links to the device
            answer = {"keyId": b64u(secrets.token_bytes(32)), "aaid": body.get("aaid", "7B1D#0001")}
            rp.sql("INSERT INTO registrations VALUES(?,?,?,?,?,?,?)", body["username"], answer["aaid"],
                   answer["keyId"], b"", 0x100, 0, body["deviceId"])
        elif kind == "MissingAuthenticatorInServer":  # the server forgets a credential
            rp.sql("DELETE FROM registrations WHERE key_id=?", body["keyId"])
        elif kind == "MissingDeviceInformationInMobileDevice":  # a target of the device the device never made
            src = rp.sql("SELECT signature_key, encryption_key FROM dispatch_targets WHERE device_id=?",
                         body["deviceId"])
            answer = {"id": b64u(secrets.token_bytes(12))}
            rp.sql("INSERT INTO dispatch_targets VALUES(?,?,?,?,?,NULL,'link',?,?)", answer["id"],
                   b64u(secrets.token_bytes(12)), body["username"], body.get("name", "Old laptop"), body["deviceId"],
                   src[0][0] if src else None, src[0][1] if src else None)
        elif kind == "MissingDeviceInformationInServer":  # the server forgets a target
            rp.sql("DELETE FROM dispatch_targets WHERE id=?", body["id"])
        elif kind == "DeviceNameMismatch":
            rp.sql("UPDATE dispatch_targets SET name=? WHERE id=?", body["name"], body["id"])
        elif kind == "FcmRegistrationTokenMismatch":
            rp.sql("UPDATE dispatch_targets SET target=? WHERE id=?", body.get("target"), body["id"])
        else:
            self.send(400, {"error": "unknown kind"}, "application/json")
            return True
        self.send(200, answer, "application/json")
        return True

    def do_GET(self):
        if self.device_route("GET", b""):
            return
        if self.path_is("/uaf/1.1/facets-moved", "/uaf/1.1/facets-moved-authorized"):  # tests: redirect rule
            self.send_response(302)
            self.send_header("Location", self.rp.args.base_url + "/nevisfido/uaf/1.1/facets")
            if self.path_is("/uaf/1.1/facets-moved-authorized"):
                self.send_header("FIDO-AppID-Redirect-Authorized", "true")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path_is("/uaf/1.1/facets"):
            ids = self.rp.args.facet
            return self.send(200, {"trustedFacets": [{"version": {"major": 1, "minor": 1}, "ids": ids},
                                                     {"version": {"major": 1, "minor": 0}, "ids": ids}]},
                             "application/fido.trusted-apps+json")
        if urlparse(self.path).path == "/_admin/registrations":
            rows = self.rp.sql("SELECT username, aaid, key_id, counter FROM registrations")
            return self.send(200, [dict(zip(("username", "aaid", "keyID", "counter"), r)) for r in rows],
                             "application/json")
        self.send(404, {"statusCode": 1404})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length > 1 << 20:
            return self.send(413, {"statusCode": 1400})
        raw = self.rfile.read(length)
        if self.device_route("POST", raw):
            return
        if urlparse(self.path).path == "/_admin/qr":  # tests and the demo: any text as a QR PNG (base64)
            return self.send(200, {"png": base64.b64encode(qr_png(json.loads(raw)["text"])).decode()},
                             "application/json")
        if urlparse(self.path).path == "/_admin/stall-registration":  # tests: {"seconds", "count"}
            f = json.loads(raw)
            self.rp.registration_stalls.extend([float(f.get("seconds", 30))] * int(f.get("count", 1)))
            return self.send(200, {}, "application/json")
        if urlparse(self.path).path == "/_admin/fault":  # tests: after `skip` good answers, errors or slow ones
            f = json.loads(raw)
            self.rp.faults.extend([None] * f.get("skip", 0) + [(f.get("status", 500), f.get("delay", 0),
                                                                 f.get("body"))] * f.get("count", 1))
            return self.send(200, {}, "application/json")
        if self.rp.faults:
            fault = self.rp.faults.pop(0)
            if fault is not None:
                status, delay, body = fault
                time.sleep(delay)
                if body is not None:  # a raw, possibly malformed, answer
                    data = body.encode()
                    self.send_response(status)
                    self.send_header("Content-Type", UAF)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                return self.send(status, {"statusCode": 1500})
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return self.send(400, {"statusCode": 1400, "description": "not JSON"})
        try:
            if self.path_is("/token/redeem/registration", "/token/redeem/authentication",
                            "/token/redeem/deregistration"):
                return self.redeem(body)
            if self.path_is("/token/create/registration", "/token/create/authentication",
                            "/token/create/deregistration"):
                return self.create_token(body)
            if self.path_is("/status"):
                rows = self.rp.sql("SELECT status, uaf_status, username FROM sessions WHERE id=?",
                                   body.get("sessionId", ""))
                st = rows[0] if rows else ("unknown", None, None)
                answer = {"status": st[0], "uafStatusCode": st[1], "userId": st[2]}
                tok = self.rp.sql("SELECT token, redeemed, target_id FROM tokens WHERE session=?",
                                  str(body.get("sessionId", "")))
                if tok:
                    result = ("tokenRedeemed" if tok[0][1] else "tokenTimedOut" if self.rp.token_expired(tok[0][0])
                              else None)
                    ext = self.rp.sql("SELECT ext_id FROM dispatch_targets WHERE id=?", tok[0][2] or "")
                    answer["tokenInformation"] = {"dispatchTargetExtId": ext[0][0] if ext else None,
                                                  "tokenResult": result}
                return self.send(200, answer, "application/json")
            if not (self.headers.get("Content-Type", "").startswith(UAF) and UAF in self.headers.get("Accept", "")):
                return self.send(415, {"statusCode": 1400, "description": "Accept/Content-Type must be " + UAF})
            if self.path_is("/uaf/1.1/request/registration", "/uaf/1.1/request/authentication",
                            "/uaf/1.1/request/deregistration"):
                op = body.get("op")
                if op not in ("Reg", "Auth", "Dereg"):
                    raise Refused(1400, "op")
                return self.send(200, self.rp.new_request(op, body.get("context")))
            if self.path_is("/uaf/1.1/registration"):
                answer = self.rp.register(body)
                if self.rp.registration_stalls:  # tests: the registration is taken, its client not told yet
                    time.sleep(self.rp.registration_stalls.pop(0))
                return self.send(200, answer)
            if self.path_is("/uaf/1.1/authentication"):
                return self.send(200, self.rp.authenticate(body))
            self.send(404, {"statusCode": 1404})
        except Refused as r:
            if self.rp.args.verbose:
                sys.stderr.write(f"rp: refused {r.code}: {r.why}\n")
            self.send(200, {"statusCode": r.code, "description": r.why})

    def create_token(self, body):
        token, session = b64u(secrets.token_bytes(16)), b64u(secrets.token_bytes(12))
        now = time.time()
        self.rp.sql("INSERT INTO tokens VALUES(?,?,?,0,?,?,NULL,?,NULL,NULL,NULL)", token, body.get("op"),
                    body.get("context"), session, now + self.rp.args.token_ttl, now)
        self.rp.sql("INSERT INTO sessions VALUES(?,?,NULL,NULL)", session, "tokenCreated")
        op = {"Reg": "registration", "Auth": "authentication", "Dereg": "deregistration"}.get(body.get("op"))
        return self.send(200, {"token": token, "sessionId": session,
                               "redeem_url": f"{self.rp.args.base_url}/nevisfido/token/redeem/{op}"}, "application/json")

    def redeem(self, body):
        rows = self.rp.sql("SELECT op, context, redeemed, session FROM tokens WHERE token=?",
                           str(body.get("token", "")))
        if not rows:
            raise Refused(1404, "unknown token")
        op, context, redeemed, session = rows[0]
        if redeemed:
            raise Refused(1491, "token already redeemed")
        if self.rp.token_expired(body["token"]):
            raise Refused(1408, "token timed out")
        self.rp.sql("UPDATE tokens SET redeemed=1 WHERE token=?", body["token"])
        self.rp.sql("UPDATE sessions SET status=? WHERE id=?",
                    "clientRegistering" if op == "Reg" else "clientAuthenticating", session)
        self.send(200, self.rp.new_request(op, context, session))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--host", default="127.0.0.1", help="loopback by default")
    p.add_argument("--db", default=":memory:")
    p.add_argument("--facet", action="append", default=[], help="trusted facet ID (repeatable)")
    p.add_argument("--aaid", action="append", default=[], help="accepted AAID (repeatable)")
    p.add_argument("--app-id", default=None, help="appID sent in requests (default: our facets URL)")
    p.add_argument("--app-id-path", default="/nevisfido/uaf/1.1/facets", help="appID as a path on this server")
    p.add_argument("--challenge-ttl", type=float, default=120.0)
    p.add_argument("--token-ttl", type=float, default=300.0, help="seconds an out-of-band token lives")
    p.add_argument("--signature-window", type=float, default=300.0,
                   help="seconds a Device-Signature's creation time may differ from now")
    p.add_argument("--attestation-root", help="PEM trust anchor: basic full attestation required and checked")
    p.add_argument("--metadata", action="append", default=[],
                   help="a FIDO UAF metadata statement file (v3.0 or UAF 1.1 form; one statement or a JSON array; "
                        "repeatable): registrations must then match their AAID's statement")
    p.add_argument("--link-base", default="https://tokenbridge.example/open",
                   help="the link dispatcher's base (its answer: <link-base>?dispatchTokenResponse=...)")
    p.add_argument("--port-file", help="write the chosen port here once listening")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args()
    if args.host not in ("127.0.0.1", "::1", "localhost") and not os.environ.get("TB_RP_ALLOW_NON_LOOPBACK"):
        sys.exit("tokenbridge-rp: refusing a non-loopback address (set TB_RP_ALLOW_NON_LOOPBACK=1)")
    args.aaid = args.aaid or ["7B1D#0001", "7B1D#0002"]
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    args.base_url = f"http://{args.host}:{server.server_address[1]}"
    args.facet = args.facet or [args.base_url]
    Handler.rp = RP(args)
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write(str(server.server_address[1]))
        os.rename(args.port_file + ".tmp", args.port_file)
    sys.stderr.write(f"tokenbridge-rp: listening on {args.base_url}\n")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
