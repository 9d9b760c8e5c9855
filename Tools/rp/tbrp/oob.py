"""The out-of-band services: dispatch targets and their Device-Signature (a compact ES256 JWS by the target's key;
request id used once, creation time within a window), dispatch tokens, the device's credentials and pending
operations."""
import base64
import json
import secrets
import sqlite3
import time

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from .payloads import jwe_encrypt, qr_png
from .wire import DeviceRefused, Refused, b64u, unb64u


class OutOfBandService:
    """The dispatch-target, dispatch-token and device services' work; mixed into RP."""

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
