"""Device information: the dispatch target made at registration, device change/check/sync against the reference RP with
a virtual PIV card, each of the six mismatch kinds with its fields, and the RP's Device-Signature verification (a
replayed, forged or stale signature is refused)."""
import base64
import json
import os
import stat
import time
import urllib.error
import urllib.request

import pytest

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from test_uaf import home, rp, tb  # noqa: F401 (fixtures)


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def unb64u(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def call(server, method, path, body=None, headers=None):
    """(status, parsed JSON or None) of one request to the RP."""
    data = body if isinstance(body, bytes) else None if body is None else json.dumps(body).encode()
    h = {"Content-Type": "application/json", "Accept": "application/json", **(headers or {})}
    req = urllib.request.Request(server.url + path, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, json.loads(raw) if raw else None


def admin(server, kind, **fields):
    status, answer = call(server, "POST", "/_admin/mismatch", {"kind": kind, **fields})
    assert status == 200, answer
    return answer


def targets(server):
    return call(server, "GET", "/_admin/targets")[1]


def device_id(home):
    return json.loads(tb(home, "info", "--json").stdout)["deviceID"]


def registered(card, rp, home, users=("alice",)):
    server = rp()
    for u in users:
        r = tb(home, "register", "--username", u, "--server", server.url, pins=["123456"])
        assert r.returncode == 0, r.stderr
    return server


def check(home):
    r = tb(home, "device", "check", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)["mismatches"]


def local_keys(home):
    return json.loads(tb(home, "authenticators", "--json").stdout)


def test_registration_makes_the_dispatch_target_with_the_device_keys(card, rp, home):
    server = registered(card, rp, home)
    [t] = targets(server)
    info = json.loads(tb(home, "info", "--json").stdout)
    assert (t["username"], t["name"], t["deviceId"], t["target"], t["dispatcher"]) == (
        "alice", info["deviceName"], info["deviceID"], None, "link")
    # The keys are kept in the data directory, 0600, and the target carries their public halves.
    path = os.path.join(home["XDG_DATA_HOME"], "tokenbridge", "device-keys.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    keys = json.load(open(path))
    d = int.from_bytes(unb64u(keys["signature"]), "big")
    pub = ec.derive_private_key(d, ec.SECP256R1()).public_key().public_numbers()
    jwk = json.loads(t["signatureKey"])
    assert (jwk["kty"], jwk["crv"]) == ("EC", "P-256")
    assert int.from_bytes(unb64u(jwk["x"]), "big") == pub.x and int.from_bytes(unb64u(jwk["y"]), "big") == pub.y
    assert json.loads(t["encryptionKey"])["use"] == "enc"
    # The credential is linked to the device at the server (registration response context).
    assert [(c["username"], c["deviceId"]) for c in call(server, "GET", "/_admin/devices")[1]] == [
        ("alice", info["deviceID"])]
    assert check(home) == []
    r = tb(home, "device", "check")
    assert r.returncode == 0 and r.stdout == f"{server.url}: no mismatch.\n", r.stdout + r.stderr


def test_each_mismatch_kind_is_reported_with_its_fields_and_sync_fixes_it(card, rp, home):
    server = registered(card, rp, home, users=("alice", "bob"))
    dev = device_id(home)
    alice_t, bob_t = sorted(targets(server), key=lambda t: t["username"])
    alice_t, bob_t = alice_t["id"], bob_t["id"]
    keys = {k["username"]: k["keyID"] for k in local_keys(home)}
    extra = admin(server, "MissingAuthenticatorInMobileDevice", deviceId=dev, username="alice")
    admin(server, "MissingAuthenticatorInServer", keyId=keys["bob"])
    other = admin(server, "MissingDeviceInformationInMobileDevice", deviceId=dev, username="carol")
    admin(server, "DeviceNameMismatch", id=alice_t, name="Renamed at the server")
    admin(server, "FcmRegistrationTokenMismatch", id=alice_t, target="fcm-from-server")
    admin(server, "MissingDeviceInformationInServer", id=bob_t)
    name = json.loads(tb(home, "info", "--json").stdout)["deviceName"]
    s = server.url
    expected = [
        {"kind": "MissingAuthenticatorInMobileDevice", "server": s, "username": "alice", "aaid": "7B1D#0001",
         "keyId": extra["keyId"]},
        {"kind": "MissingAuthenticatorInServer", "server": s, "username": "bob", "aaid": "7B1D#0001",
         "keyId": keys["bob"]},
        {"kind": "MissingDeviceInformationInMobileDevice", "server": s, "username": "carol",
         "dispatchTargetId": other["id"]},
        {"kind": "DeviceNameMismatch", "server": s, "dispatchTargetId": alice_t,
         "nameInServer": "Renamed at the server", "nameInMobileDevice": name},
        {"kind": "FcmRegistrationTokenMismatch", "server": s, "dispatchTargetId": alice_t,
         "fcmRegistrationTokenInServer": "fcm-from-server"},
        {"kind": "MissingDeviceInformationInServer", "server": s, "username": "bob", "dispatchTargetId": bob_t},
    ]
    key = lambda d: json.dumps(d, sort_keys=True)  # noqa: E731
    assert sorted(check(home), key=key) == sorted(expected, key=key)
    human = tb(home, "device", "check")
    assert human.returncode == 0 and f"{s}: 6 mismatch(es):" in human.stdout
    assert f"  DeviceNameMismatch: dispatchTargetId={alice_t} nameInMobileDevice={name} " \
           f"nameInServer=Renamed at the server server={s}" in human.stdout

    # Without a terminal or --yes, sync lists what it would delete on which side, and does nothing.
    r = tb(home, "device", "sync")
    assert r.returncode == 3, r.stderr
    assert f"  delete at the server {s}: the credential 7B1D#0001 {extra['keyId']} of alice" in r.stderr
    assert f"  delete on this device: the registration 7B1D#0001 {keys['bob']} of bob at {s}" in r.stderr
    assert f"  delete at the server {s}: the dispatch target {other['id']} of carol" in r.stderr
    assert f"  create at the server {s}: the dispatch target of bob" in r.stderr
    assert "The sync will delete 3 item(s) as listed above. Not confirmed: run on a terminal, or add --yes." \
        in r.stderr
    assert len(check(home)) == 6

    r = tb(home, "device", "sync", "--yes")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("Done: ") == 5
    assert check(home) == []
    [alice_now] = [t for t in targets(server) if t["id"] == alice_t]
    assert (alice_now["name"], alice_now["target"]) == (name, None)
    assert [k["username"] for k in local_keys(home)] == ["alice"]
    assert extra["keyId"] not in [c["keyId"] for c in call(server, "GET", "/_admin/devices")[1]]
    assert tb(home, "device", "sync", "--yes").stdout == "Nothing to sync.\n"


def test_deregistering_an_accounts_last_key_removes_its_dispatch_target(card, rp, home):
    server = registered(card, rp, home, users=("alice", "bob"))
    assert tb(home, "deregister", "--username", "alice", "--server", server.url).returncode == 0
    assert [t["username"] for t in targets(server)] == ["bob"]
    assert check(home) == []
    assert tb(home, "deregister", "--username", "bob", "--server", server.url).returncode == 0
    assert targets(server) == []


@pytest.mark.parametrize("target_id", [
    "a b", "a/b", "100%", "%41", "a?b=c", "a#b", "k\u00e4se-\u043a\u043b\u044e\u0447", "...", "a.b", "%2e%2f"])
def test_dispatch_target_ids_outside_the_unreserved_set_can_be_modified_and_deleted(card, rp, home, target_id):
    """An id is one path segment, percent-encoded exactly once (before: twice, so the server never found it)."""
    server = rp()
    assert call(server, "POST", "/_admin/next-target-ids", {"ids": [target_id]})[0] == 200
    r = tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"])
    assert r.returncode == 0, r.stderr
    assert [t["id"] for t in targets(server)] == [target_id]
    assert check(home) == []
    r = tb(home, "device", "change", "--name", "Work laptop")
    assert r.returncode == 0, r.stderr
    assert [t["name"] for t in targets(server)] == ["Work laptop"]
    r = tb(home, "deregister", "--username", "alice", "--server", server.url)
    assert r.returncode == 0 and "dispatch target" not in r.stderr, r.stderr
    assert targets(server) == []


@pytest.mark.parametrize("target_id", [".", "..", "%2e", "%2E%2e", ".%2E", "%252e%252E"])
def test_a_dispatch_target_id_that_is_a_dot_segment_is_refused(card, rp, home, target_id):
    """"." and ".." (also percent-encoded, once or twice) cannot be one path segment: sent even as %2E%2E, URL
    parsers and servers resolve them (a DELETE of .../targets/%2E%2E can reach .../dispatch). The id is refused
    when the server gives it: the registration stands, no target is kept here, and nothing is sent with it."""
    server = rp()
    assert call(server, "POST", "/_admin/next-target-ids", {"ids": [target_id]})[0] == 200
    r = tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"])
    assert r.returncode == 0, r.stderr
    assert (f'named a dispatch target "{target_id}", which is a URL dot-segment: a request about it would reach '
            "another resource, so it is neither kept nor used.") in r.stderr, r.stderr
    assert [x["username"] for x in server.registrations()] == ["alice"]
    r = tb(home, "deregister", "--username", "alice", "--server", server.url)
    assert r.returncode == 0, r.stderr
    assert server.registrations() == []
    # The server made the target; nothing here ever addressed it, so it is still there, as the server named it.
    assert [t["id"] for t in targets(server)] == [target_id]


def test_a_dispatch_target_that_cannot_be_made_leaves_the_registration_and_shows_in_check(card, rp, home):
    server = rp()
    server.post("/_admin/fault", {"scope": "device", "status": 400, "count": 1}, uaf=False)
    r = tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"])
    assert r.returncode == 0, r.stderr
    assert "dispatch target at the server was not made or removed (tokenbridge device check shows it): The " \
           "server answered HTTP 400." in r.stderr
    assert targets(server) == [] and [x["username"] for x in server.registrations()] == ["alice"]
    assert check(home) == [{"kind": "MissingDeviceInformationInServer", "server": server.url, "username": "alice"}]
    r = tb(home, "device", "sync")  # nothing to delete: no question
    assert r.returncode == 0 and f"Done: create at the server {server.url}: the dispatch target of alice." in r.stdout
    assert [t["username"] for t in targets(server)] == ["alice"] and check(home) == []


def test_change_sets_name_and_push_token_at_the_server_and_here(card, rp, home):
    server = registered(card, rp, home)
    r = tb(home, "device", "change", "--name", "Work laptop", "--push-token", "fcm-123")
    assert r.returncode == 0, r.stderr
    [t] = targets(server)
    assert (t["name"], t["target"], t["dispatcher"]) == ("Work laptop", "fcm-123", "firebase-cloud-messaging")
    info = json.loads(tb(home, "info", "--json").stdout)
    assert (info["deviceName"], info["devicePushToken"]) == ("Work laptop", "fcm-123")
    assert check(home) == []
    assert tb(home, "device", "change", "--disable-push").returncode == 0
    [t] = targets(server)
    assert (t["target"], t["dispatcher"]) == (None, "link")
    assert json.loads(tb(home, "info", "--json").stdout)["devicePushToken"] == "(none: push disabled)"
    assert check(home) == []


def test_change_errors_have_their_codes_and_change_nothing_here(card, rp, home):
    server = registered(card, rp, home)
    dev = device_id(home)
    admin(server, "MissingDeviceInformationInMobileDevice", deviceId=dev, username="alice", name="Taken")
    before = json.loads(tb(home, "info", "--json").stdout)["deviceName"]
    r = tb(home, "device", "change", "--name", "Taken")
    assert r.returncode == 20, r.stderr
    assert f"already has a device named \"Taken\" for this user; choose another name." in r.stderr
    assert json.loads(tb(home, "info", "--json").stdout)["deviceName"] == before
    [mine] = [t for t in targets(server) if t["name"] != "Taken"]
    admin(server, "MissingDeviceInformationInServer", id=mine["id"])
    r = tb(home, "device", "change", "--name", "New")
    assert r.returncode == 20 and f"does not know {mine['id']}; run tokenbridge device check." in r.stderr, r.stderr
    r = tb(home, "device", "change", "--push-token", "a", "--disable-push")
    assert r.returncode == 64 and "--push-token and --disable-push exclude each other" in r.stderr
    r = tb(home, "device", "change")
    assert r.returncode == 64 and "give --name, --push-token or --disable-push" in r.stderr


def test_no_device_information_before_a_registration(home):
    for args in (["device", "check"], ["device", "sync"], ["device", "change", "--name", "x"], ["pending"]):
        r = tb(home, *args)
        assert r.returncode == 26, r.stderr
        assert "no device information on this machine yet: register a token first" in r.stderr


def test_network_failures_are_retried_a_few_times_but_never_a_4xx(card, rp, home):
    server = registered(card, rp, home)
    server.post("/_admin/fault", {"scope": "device", "status": 503, "count": 2}, uaf=False)
    r = tb(home, "device", "check", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["mismatches"] == [], r.stdout + r.stderr
    server.post("/_admin/fault", {"scope": "device", "status": 503, "count": 3}, uaf=False)
    r = tb(home, "device", "check")
    assert r.returncode == 21 and "could not check" in r.stderr and "HTTP 503" in r.stderr, r.stderr
    # One 400, then good answers: a retry would have succeeded, so failing shows there was none.
    server.post("/_admin/fault", {"scope": "device", "status": 400, "count": 1}, uaf=False)
    r = tb(home, "device", "check")
    assert r.returncode == 21 and "The server answered HTTP 400." in r.stderr, r.stderr
    assert tb(home, "device", "check").returncode == 0


def es256(key, header, payload):
    h = b64u(json.dumps(header).encode())
    p = b64u(json.dumps(payload).encode())
    r, s = decode_dss_signature(key.sign(f"{h}.{p}".encode(), ec.ECDSA(hashes.SHA256())))
    return f"{h}.{p}." + b64u(r.to_bytes(32, "big") + s.to_bytes(32, "big"))


def test_the_rp_refuses_replayed_forged_and_stale_device_signatures(card, rp, home):
    server = registered(card, rp, home)
    dev = device_id(home)
    [t] = targets(server)
    assert check(home) == []
    used = call(server, "GET", "/_admin/last-signature")[1]["signature"]
    header, payload, sig = used.split(".")
    assert json.loads(unb64u(header)) == {"alg": "ES256", "typ": "JOSE"}
    fields = json.loads(unb64u(payload))
    assert fields["dispatchTargetId"] == t["id"] and 1 <= len(fields["requestId"]) <= 64
    assert abs(fields["creationTimeInEpochMillis"] - time.time() * 1000) < 300_000
    path = f"/nevisfido/devices/credentials/{dev}"
    # Replayed: the same signature again.
    assert call(server, "GET", path, headers={"Device-Signature": used})[0] == 401
    # Forged: another key, or a changed payload under the old signature.
    other = ec.generate_private_key(ec.SECP256R1())
    fresh = {**fields, "requestId": b64u(os.urandom(16)), "creationTimeInEpochMillis": int(time.time() * 1000)}
    assert call(server, "GET", path, headers={"Device-Signature": es256(other, {"alg": "ES256"}, fresh)})[0] == 401
    tampered = f"{header}.{b64u(json.dumps(fresh).encode())}.{sig}"
    assert call(server, "GET", path, headers={"Device-Signature": tampered})[0] == 401
    assert call(server, "GET", path)[0] == 401  # none
    # With the device key (the file the client keeps): stale is refused, fresh accepted once.
    keys = json.load(open(os.path.join(home["XDG_DATA_HOME"], "tokenbridge", "device-keys.json")))
    mine = ec.derive_private_key(int.from_bytes(unb64u(keys["signature"]), "big"), ec.SECP256R1())
    stale = {**fresh, "requestId": b64u(os.urandom(16)), "creationTimeInEpochMillis": int(time.time() * 1000) - 600_000}
    assert call(server, "GET", path, headers={"Device-Signature": es256(mine, {"alg": "ES256"}, stale)})[0] == 401
    good = es256(mine, {"alg": "ES256"}, fresh)
    status, answer = call(server, "GET", path, headers={"Device-Signature": good})
    assert status == 200 and answer["dispatchTargets"][0]["id"] == t["id"]
    assert call(server, "GET", path, headers={"Device-Signature": good})[0] == 401
    # A signature of another device's target is not this device's: 404.
    assert call(server, "GET", "/nevisfido/devices/credentials/other-device",
                headers={"Device-Signature": es256(mine, {"alg": "ES256"}, {**fresh, "requestId": "x1"})})[0] == 404


def test_a_refused_signature_and_an_unknown_device_have_their_own_messages(card, rp, home):
    server = registered(card, rp, home)
    [t] = targets(server)
    # The server holds another public key for the target: the client's signature cannot verify there.
    other = ec.generate_private_key(ec.SECP256R1()).public_key().public_numbers()
    jwk = json.dumps({"kty": "EC", "crv": "P-256", "x": b64u(other.x.to_bytes(32, "big")),
                      "y": b64u(other.y.to_bytes(32, "big"))})
    assert call(server, "POST", "/_admin/target-key", {"id": t["id"], "signatureKey": jwk})[0] == 200
    for args in (["device", "check"], ["pending"]):
        r = tb(home, *args)
        assert r.returncode == 20, r.stderr
        assert f"The server {server.url} refused this device's signature (bad, replayed or stale request)" in r.stderr
    # The server forgot the target: it cannot be asked for pending operations (check reports the mismatch).
    admin(server, "MissingDeviceInformationInServer", id=t["id"])
    r = tb(home, "pending")
    assert r.returncode == 26, r.stderr
    assert f"The server {server.url} knows no dispatch target of this device, so it cannot be asked; run " \
           "tokenbridge device sync." in r.stderr
    assert [m["kind"] for m in check(home)] == ["MissingDeviceInformationInServer"]


def test_sync_is_best_effort_and_reports_each_failure(card, rp, home):
    server = registered(card, rp, home)
    dev = device_id(home)
    [mine] = targets(server)
    foreign = admin(server, "MissingDeviceInformationInMobileDevice", deviceId=dev, username="carol")
    other = ec.generate_private_key(ec.SECP256R1()).public_key().public_numbers()
    jwk = json.dumps({"kty": "EC", "crv": "P-256", "x": b64u(other.x.to_bytes(32, "big")),
                      "y": b64u(other.y.to_bytes(32, "big"))})
    assert call(server, "POST", "/_admin/target-key", {"id": foreign["id"], "signatureKey": jwk})[0] == 200
    admin(server, "DeviceNameMismatch", id=mine["id"], name="Elsewhere")
    r = tb(home, "device", "sync", "--yes", "--json")
    assert r.returncode == 20, r.stdout + r.stderr
    steps = json.loads(r.stdout)["steps"]
    assert [(s["deletes"], s["done"], s.get("exitCode")) for s in steps] == [(True, False, 20), (False, True, None)]
    assert steps[0]["action"] == f"delete at the server {server.url}: the dispatch target {foreign['id']} of carol"
    assert steps[0]["error"].startswith(f"The server {server.url} refused this device's signature")
    # The failed step changed nothing; the other one was done.
    assert [m["kind"] for m in check(home)] == ["MissingDeviceInformationInMobileDevice"]
    r = tb(home, "device", "sync", "--yes")
    assert r.returncode == 20
    assert f"tokenbridge: failed: delete at the server {server.url}: the dispatch target {foreign['id']} of carol: " \
           f"The server {server.url} refused this device's signature" in r.stderr


def test_sync_asks_on_a_terminal_and_no_changes_nothing(card, rp, home):
    import re

    import pexpect

    from conftest import TOKENBRIDGE
    server = registered(card, rp, home)
    extra = admin(server, "MissingAuthenticatorInMobileDevice", deviceId=device_id(home), username="alice")
    child = pexpect.spawn(TOKENBRIDGE, ["device", "sync"], env=dict(os.environ, **home), encoding="utf-8", timeout=30)
    child.expect(re.escape(f"delete at the server {server.url}: the credential 7B1D#0001 {extra['keyId']} of alice"))
    child.expect(re.escape("The sync will delete 1 item(s) as listed above. Type yes to continue: "))
    child.sendline("no")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 3
    assert [m["kind"] for m in check(home)] == ["MissingAuthenticatorInMobileDevice"]
