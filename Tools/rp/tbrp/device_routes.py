"""HTTP routes of the dispatch-target, dispatch-token and device services (backend contract sections 5, 6)."""
import json
import secrets
import sys
import time
from urllib.parse import parse_qs, unquote, urlparse

from cryptography.hazmat.primitives.asymmetric import ec

from .wire import DeviceRefused, b64u, unb64u


def segment(raw):
    """One path segment as the client meant it: percent-decoded once (UTF-8). A raw `/` means another path, and a raw
    `.`/`..` would have been resolved by any URL layer on the way: neither names a target or device."""
    if "/" in raw or raw in ("", ".", ".."):
        raise DeviceRefused(404, "no such path segment")
    return unquote(raw, errors="strict")


class DeviceRoutes:
    """Mixed into Handler: its `rp`, `headers`, `path` and `send`."""

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
