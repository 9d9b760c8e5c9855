"""Test endpoints of the out-of-band and device services (loopback clients only)."""
import json
import secrets

from .wire import b64u


class AdminRoutes:
    """Mixed into Handler: its `rp`, `send` and `loopback_client`."""

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
