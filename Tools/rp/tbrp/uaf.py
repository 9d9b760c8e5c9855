"""The UAF services: requests (Reg, Auth, Dereg) with single-use expiring challenges, and the verification of the
registration and authentication responses."""
import hashlib
import json
import secrets
import struct
import sys
import time

from .verify import issued_by, public_key, verify
from .wire import TAG, Refused, b64u, field, tlv, unb64u_strict


class UafService:
    """The UAF request and response endpoints' work; mixed into RP (its database, arguments and lock)."""

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
        self.release_held_store(username)
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
        self.store_registration(username, (username, aaid, kid, pub, key_enc, sign_counter, device_id))
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
