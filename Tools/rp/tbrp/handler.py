"""The HTTP handler: the UAF endpoints (facets, request/response for Reg/Auth/Dereg, token create/redeem, status) and
their test endpoints; the device services' routes and admin endpoints come from their mixins."""
import base64
import json
import secrets
import sys
import time
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlparse

from .admin import AdminRoutes
from .device_routes import DeviceRoutes
from .payloads import qr_png
from .rp import RP
from .wire import UAF, Refused, b64u


class Handler(DeviceRoutes, AdminRoutes, BaseHTTPRequestHandler):
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

    def body_route(self, method):
        """A PATCH or DELETE: only the device routes take them, with a body of at most 64 KiB."""
        length = int(self.headers.get("Content-Length") or 0)
        if length > 1 << 16:
            return self.send(413, {}, "application/json")
        if not self.device_route(method, self.rfile.read(length)):
            self.send(404, {}, "application/json")

    def do_PATCH(self):
        self.body_route("PATCH")

    def do_DELETE(self):
        self.body_route("DELETE")

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
        if urlparse(self.path).path == "/_admin/held-registrations":  # tests: the users whose store is held
            with self.rp.lock:
                held = sorted(self.rp.held)
            return self.send(200, held, "application/json")
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
        if urlparse(self.path).path == "/_admin/hold-registration-store":  # tests: {"count"} (RP.store_registration)
            with self.rp.lock:
                self.rp.store_holds += int(json.loads(raw).get("count", 1))
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
                               "redeem_url": f"{self.rp.args.base_url}/nevisfido/token/redeem/{op}"},
                         "application/json")

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
