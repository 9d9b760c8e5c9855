#!/usr/bin/env python3
"""tokenbridge-rp: a reference relying party speaking the nevisFIDO UAF endpoints (test fixture, not product).

Verifies for real, with its own TLV parser (independent of the client's Swift code): ECDSA P-256 signatures
(DER and raw), public keys (raw X9.62 and DER SPKI), FINAL_CHALLENGE_HASH, single-use expiring challenges,
appID and facet ID, policy AAIDs, growing counters and transaction content hashes. Loopback only by default.
See ../shared/specs/backend-contract.md (sections 1-3, 6).
"""
import argparse
import base64
import hashlib
import json
import os
import secrets
import sqlite3
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

UAF = "application/fido+uaf"
TAG = dict(REG_ASSERTION=0x3E01, AUTH_ASSERTION=0x3E02, KRD=0x3E03, SIGNED_DATA=0x3E04, SIGNATURE=0x2E06,
           ATT_FULL=0x3E07, ATT_SURROGATE=0x3E08, KEYID=0x2E09, FCH=0x2E0A, AAID=0x2E0B, PUB_KEY=0x2E0C,
           COUNTERS=0x2E0D, INFO=0x2E0E, NONCE=0x2E0F, TCH=0x2E10)


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


class RP:
    def __init__(self, args):
        self.args = args
        self.db = sqlite3.connect(args.db, check_same_thread=False)
        self.lock = threading.Lock()
        self.faults = []  # queued (status, delay) answers for tests
        self.db.executescript("""
            CREATE TABLE IF NOT EXISTS challenges(server_data TEXT PRIMARY KEY, op TEXT, username TEXT,
              challenge TEXT, expires REAL, used INTEGER, tx TEXT, upv TEXT, session TEXT);
            CREATE TABLE IF NOT EXISTS registrations(username TEXT, aaid TEXT, key_id TEXT, public_key BLOB,
              key_encoding INTEGER, counter INTEGER, PRIMARY KEY(aaid, key_id));
            CREATE TABLE IF NOT EXISTS tokens(token TEXT PRIMARY KEY, op TEXT, context TEXT, redeemed INTEGER,
              session TEXT);
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
            fc = json.loads(unb64u(fc_params))
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
        return username, fch, unb64u(assertion["assertion"]), tx, session

    def register(self, body):
        username, fch, raw, _, session = self.check_response("Reg", body)
        top = tlv(raw)
        if len(top) != 1 or top[0][0] != TAG["REG_ASSERTION"]:
            raise Refused(1498, "not a registration assertion")
        krd_bytes, krd = field(top[0][2], "KRD")
        aaid = field(krd, "AAID")[0].decode(errors="replace")
        if aaid not in self.args.aaid:
            raise Refused(1492, f"AAID {aaid} not accepted")
        info = field(krd, "INFO")[0]
        if len(info) != 7:
            raise Refused(1498, "ASSERTION_INFO")
        _, mode, sig_alg, key_enc = struct.unpack("<HBHH", info)
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
        if att is not None:
            if self.args.attestation_root:
                raise Refused(1496, "basic full attestation is required")
            verify(key, sig_alg, field(att_children, "SIGNATURE")[0], signed)
        else:
            full, full_children = field(top[0][2], "ATT_FULL", required=False)
            if full is None:
                raise Refused(1496, "no attestation")
            self.check_full_attestation(full_children, sig_alg, signed)
        kid = b64u(key_id)
        if self.sql("SELECT 1 FROM registrations WHERE aaid=? AND key_id=?", aaid, kid):
            raise Refused(1498, "KeyID already registered")
        self.sql("INSERT INTO registrations VALUES(?,?,?,?,?,?)", username, aaid, kid, pub, key_enc, sign_counter)
        self.finish(session, 1200, username)
        return {"statusCode": 1200, "description": f"registered {aaid} for {username}"}

    def check_full_attestation(self, children, sig_alg, signed):
        from cryptography import x509
        certs = [v for t, v, _ in children if t == 0x2E05]
        if not certs:
            raise Refused(1496, "basic full attestation without certificate")
        try:
            leaf = x509.load_der_x509_certificate(certs[0])
        except ValueError:
            raise Refused(1496, "attestation certificate does not parse")
        verify(leaf.public_key(), sig_alg, field(children, "SIGNATURE")[0], signed)
        if not self.args.attestation_root:
            raise Refused(1496, "no attestation trust anchor configured")
        with open(self.args.attestation_root, "rb") as f:
            root = x509.load_pem_x509_certificate(f.read())
        try:
            root.public_key().verify(leaf.signature, leaf.tbs_certificate_bytes, ec.ECDSA(leaf.signature_hash_algorithm))
        except (InvalidSignature, ValueError, TypeError):
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

    def do_GET(self):
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
                return self.send(200, {"status": st[0], "uafStatusCode": st[1], "userId": st[2]}, "application/json")
            if not (self.headers.get("Content-Type", "").startswith(UAF) and UAF in self.headers.get("Accept", "")):
                return self.send(415, {"statusCode": 1400, "description": "Accept/Content-Type must be " + UAF})
            if self.path_is("/uaf/1.1/request/registration", "/uaf/1.1/request/authentication",
                            "/uaf/1.1/request/deregistration"):
                op = body.get("op")
                if op not in ("Reg", "Auth", "Dereg"):
                    raise Refused(1400, "op")
                return self.send(200, self.rp.new_request(op, body.get("context")))
            if self.path_is("/uaf/1.1/registration"):
                return self.send(200, self.rp.register(body))
            if self.path_is("/uaf/1.1/authentication"):
                return self.send(200, self.rp.authenticate(body))
            self.send(404, {"statusCode": 1404})
        except Refused as r:
            if self.rp.args.verbose:
                sys.stderr.write(f"rp: refused {r.code}: {r.why}\n")
            self.send(200, {"statusCode": r.code, "description": r.why})

    def create_token(self, body):
        token, session = b64u(secrets.token_bytes(16)), b64u(secrets.token_bytes(12))
        self.rp.sql("INSERT INTO tokens VALUES(?,?,?,0,?)", token, body.get("op"), body.get("context"), session)
        self.rp.sql("INSERT INTO sessions VALUES(?,?,NULL,NULL)", session, "tokenCreated")
        op = {"Reg": "registration", "Auth": "authentication", "Dereg": "deregistration"}.get(body.get("op"))
        return self.send(200, {"token": token, "sessionId": session,
                               "redeem_url": f"{self.rp.args.base_url}/nevisfido/token/redeem/{op}"}, "application/json")

    def redeem(self, body):
        rows = self.rp.sql("SELECT op, context, redeemed, session FROM tokens WHERE token=?", body.get("token", ""))
        if not rows:
            raise Refused(1404, "unknown token")
        op, context, redeemed, session = rows[0]
        if redeemed:
            raise Refused(1491, "token already redeemed")
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
    p.add_argument("--attestation-root", help="PEM trust anchor: basic full attestation required and checked")
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
