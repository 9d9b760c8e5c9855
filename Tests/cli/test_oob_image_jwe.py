"""Out-of-band, beyond Tests/cli/test_oob.py: QR codes from real PNG/JPEG images (rendered by the reference RP with
segno, decoded by tokenbridge with zbar over libpng/libjpeg), encrypted payloads (the RP encrypts a dispatch for the
target's encryptionKey with python cryptography; tokenbridge decrypts with the device key), and the desktop handler
(desktop-file-validate checks the entry)."""
import base64
import json
import os
import struct
import subprocess
import zlib

import segno

from test_device import call, targets
from test_oob import payload, qr
from test_uaf import home, rp, tb  # noqa: F401 (fixtures)


def rendered(server, text, path):
    """The RP's QR PNG of `text`, written to `path`."""
    status, answer = call(server, "POST", "/_admin/qr", {"text": text})
    assert status == 200, answer
    path.write_bytes(base64.b64decode(answer["png"]))
    return str(path)


def dispatch(server, target, op, data=None, encrypt=False, **context):
    """The RP's dispatch token service (link dispatcher); `encrypt` asks for a JWE for the target's key."""
    name = {"Reg": "registration", "Auth": "authentication", "Dereg": "deregistration"}[op]
    body = {"dispatchTargetId": target, "getUafRequest": {"op": op, "context": json.dumps(context)},
            "encrypt": encrypt}
    if data is not None:
        body["data"] = data
    status, answer = call(server, "POST", f"/nevisfido/token/dispatch/{name}", body)
    assert status == 200 and answer["dispatchResult"] == "dispatched", answer
    return answer


def png(rows):
    """A grayscale PNG of `rows` (lists of 0-255), written by hand (zlib): for images the RP does not render."""
    raw = b"".join(b"\0" + bytes(r) for r in rows)
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", len(rows[0]), len(rows), 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def qr_rows(text, scale=4, border=4):
    m = [list(r) for r in segno.make_qr(text).matrix]
    size = len(m) + 2 * border
    out = []
    for y in range(size):
        row = []
        for x in range(size):
            dark = border <= y < size - border and border <= x < size - border and m[y - border][x - border]
            row += [0 if dark else 255] * scale
        out += [row] * scale
    return out


def test_registration_from_a_png_and_authentication_from_a_jpeg(card, rp, home, tmp_path):
    server = rp()
    image = rendered(server, qr(payload(server, "Reg", username="alice")), tmp_path / "reg.png")
    r = tb(home, "oob", "--qr-image", image, "--yes", pins=["123456"])
    assert r.returncode == 0, r.stderr
    assert "Registered alice" in r.stdout and [x["username"] for x in server.registrations()] == ["alice"]
    # A photo-like JPEG of the same kind of code (cjpeg from libjpeg-turbo-progs converts the RP's render).
    ppm = tmp_path / "auth.ppm"
    segno.make_qr(qr(payload(server, "Auth", username="alice"))).save(str(ppm), scale=5)
    jpeg = tmp_path / "auth.jpg"
    with open(jpeg, "wb") as f:
        subprocess.run(["cjpeg", "-quality", "85", str(ppm)], stdout=f, check=True)
    r = tb(home, "oob", "--qr-image", str(jpeg), "--yes", pins=["123456"])
    assert r.returncode == 0, r.stderr
    assert "Authenticated as alice" in r.stdout


def test_a_qr_code_holding_a_link_from_the_link_png_dispatcher(card, rp, home, tmp_path):
    server = rp()
    assert tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"]).returncode == 0
    [t] = targets(server)
    name = "/nevisfido/token/dispatch/authentication"
    status, answer = call(server, "POST", name, {
        "dispatchTargetId": t["id"], "dispatcher": "link-png-qr-code",
        "getUafRequest": {"op": "Auth", "context": json.dumps({"username": "alice"})}})
    assert status == 200 and answer["dispatchResult"] == "dispatched", answer
    image = tmp_path / "link.png"
    image.write_bytes(base64.b64decode(answer["dispatcherInformation"]["response"]))
    r = tb(home, "oob", "--qr-image", str(image), "--decode-only", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["operation"] == "authentication"
    r = tb(home, "oob", "--qr-image", str(image), "--yes", pins=["123456"])
    assert r.returncode == 0 and "Authenticated as alice" in r.stdout, r.stderr


def test_images_without_exactly_one_qr_code_and_unreadable_files(home, tmp_path):
    cases = []
    text = tmp_path / "notes.txt"
    text.write_text("not an image")
    cases.append((str(text), 31, "The file is not a PNG or JPEG image"))
    blank = tmp_path / "blank.png"
    blank.write_bytes(png([[255] * 64 for _ in range(64)]))
    cases.append((str(blank), 31, "No QR code was found in the image"))
    a, b = qr_rows("first"), qr_rows("second")
    two = tmp_path / "two.png"
    two.write_bytes(png([ra + rb for ra, rb in zip(a, b)]))
    cases.append((str(two), 31, "The image holds 2 QR codes; crop it to the one to use."))
    good = png(qr_rows("x"))
    truncated = tmp_path / "truncated.png"
    truncated.write_bytes(good[:len(good) // 2])
    cases.append((str(truncated), 31, "The image cannot be decoded"))
    cases.append((str(tmp_path / "missing.png"), 64, f"Cannot use {tmp_path}/missing.png: No such file or directory."))
    cases.append((str(tmp_path), 64, f"Cannot use {tmp_path}: Is a directory."))
    for path, code, message in cases:
        r = tb(home, "oob", "--qr-image", path, "--yes")
        assert (r.returncode, message in r.stderr) == (code, True), (path, r.returncode, r.stderr)
        assert "Traceback" not in r.stderr


def test_an_encrypted_dispatch_for_this_device(card, rp, home):
    server = rp()
    assert tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"]).returncode == 0
    [t] = targets(server)
    answer = dispatch(server, t["id"], "Auth", data="Pay 7 EUR", username="alice", encrypt=True)
    link = answer["dispatcherInformation"]["response"]
    inner = json.loads(base64.urlsafe_b64decode(link.split("=", 1)[1] + "=="))
    assert inner["nma_data_content_type"] == "application/jose" and inner["nma_data"].count(".") == 4
    assert "Pay 7 EUR" not in json.dumps(inner)  # the data is inside the JWE
    r = tb(home, "oob", link, "--decode-only", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["operation"], d["encrypted"], d["data"]) == ("authentication", True, "Pay 7 EUR")
    # Pending operations are decrypted the same way.
    r = tb(home, "pending", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["operations"][0]["data"] == "Pay 7 EUR", r.stdout + r.stderr
    r = tb(home, "oob", link, "--yes", pins=["123456"])
    assert r.returncode == 0 and "Authenticated as alice" in r.stdout, r.stderr


def test_a_payload_encrypted_for_another_key_or_tampered_is_not_decryptable(card, rp, home):
    from cryptography.hazmat.primitives.asymmetric import ec
    server = rp()
    assert tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"]).returncode == 0
    [t] = targets(server)
    n = ec.generate_private_key(ec.SECP256R1()).public_key().public_numbers()
    other_key = json.dumps({"kty": "EC", "crv": "P-256", "x": base64.urlsafe_b64encode(n.x.to_bytes(32, "big"))
                            .rstrip(b"=").decode(), "y": base64.urlsafe_b64encode(n.y.to_bytes(32, "big"))
                            .rstrip(b"=").decode()})
    status, other = call(server, "POST", "/nevisfido/token/dispatch/targets", {
        "username": "alice", "name": "Phone", "deviceId": "another-device", "signatureKey": t["signatureKey"],
        "encryptionKey": other_key})
    assert status == 201, other
    message = "The payload is encrypted for another device's key; it cannot be read here. Nothing was done."
    link = dispatch(server, other["id"], "Auth", username="alice", encrypt=True)["dispatcherInformation"]["response"]
    r = tb(home, "oob", link, "--yes", pins=["123456"])
    assert (r.returncode, message in r.stderr) == (30, True), r.stderr
    # Ours, with one bit of the ciphertext flipped: the GCM tag does not match.
    link = dispatch(server, t["id"], "Auth", username="alice", encrypt=True)["dispatcherInformation"]["response"]
    inner = json.loads(base64.urlsafe_b64decode(link.split("=", 1)[1] + "=="))
    parts = inner["nma_data"].split(".")
    ct = bytearray(base64.urlsafe_b64decode(parts[3] + "=="))
    ct[0] ^= 1
    parts[3] = base64.urlsafe_b64encode(bytes(ct)).rstrip(b"=").decode()
    inner["nma_data"] = ".".join(parts)
    r = tb(home, "oob", "--qr-text", qr(inner), "--yes", pins=["123456"])
    assert (r.returncode, message in r.stderr) == (30, True), r.stderr


def test_the_desktop_entry_is_valid_and_installs_as_the_tokenbridge_handler(home, tmp_path):
    r = tb(home, "install-desktop", "--print", "--executable", "/opt/my tools/tokenbridge")
    assert r.returncode == 0, r.stderr
    assert 'Exec="/opt/my tools/tokenbridge" oob %u\n' in r.stdout
    entry = tmp_path / "tokenbridge.desktop"
    entry.write_text(r.stdout)
    v = subprocess.run(["desktop-file-validate", str(entry)], capture_output=True, text=True)
    assert (v.returncode, v.stdout + v.stderr) == (0, "")
    r = tb(home, "install-desktop", "--executable", "/usr/lib/tokenbridge-test/tokenbridge")
    assert r.returncode == 0, r.stderr
    installed = os.path.join(home["XDG_DATA_HOME"], "applications", "tokenbridge.desktop")
    assert r.stdout.splitlines() == [f"Installed {installed}", "Default handler of tokenbridge: links."]
    with open(installed) as f:
        assert "Exec=/usr/lib/tokenbridge-test/tokenbridge oob %u\n" in f.read()
    assert os.stat(installed).st_mode & 0o777 == 0o644
    v = subprocess.run(["desktop-file-validate", installed], capture_output=True, text=True)
    assert (v.returncode, v.stdout + v.stderr) == (0, "")
    env = dict(os.environ, **home)
    q = subprocess.run(["xdg-mime", "query", "default", "x-scheme-handler/tokenbridge"], capture_output=True,
                       text=True, env=env)
    assert q.stdout.strip() == "tokenbridge.desktop", q.stderr
    with open(os.path.join(home["XDG_DATA_HOME"], "applications", "mimeinfo.cache")) as f:
        assert "x-scheme-handler/tokenbridge=tokenbridge.desktop;" in f.read()


def test_a_program_path_that_needs_quoting_is_run_through_a_link(home, tmp_path):
    """xdg-open (xdg-utils 1.1.3) takes Exec's first space-separated word as the program and ignores the quoting the
    specification defines: an executable under a path with a space is run through a link beside the entry
    ($XDG_DATA_HOME/tokenbridge/bin/tokenbridge); a second install replaces the link, and a file there that is not a
    link is left alone and refused."""
    exe = "/opt/my tools/tokenbridge"
    link = os.path.join(home["XDG_DATA_HOME"], "tokenbridge", "bin", "tokenbridge")
    installed = os.path.join(home["XDG_DATA_HOME"], "applications", "tokenbridge.desktop")
    for _ in range(2):
        r = tb(home, "install-desktop", "--executable", exe)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[:2] == [
            f"Installed {installed}",
            f"It runs {link}, a link to {exe} (xdg-open cannot start a program path that needs quoting)."]
        assert os.readlink(link) == exe
        with open(installed) as f:
            assert f"Exec={link} oob %u\n" in f.read()
        v = subprocess.run(["desktop-file-validate", installed], capture_output=True, text=True)
        assert (v.returncode, v.stdout + v.stderr) == (0, "")
    os.unlink(link)
    with open(link, "w") as f:
        f.write("not ours")
    r = tb(home, "install-desktop", "--executable", exe)
    assert r.returncode != 0 and link in r.stderr, (r.returncode, r.stderr)
    with open(link) as f:
        assert f.read() == "not ours"
