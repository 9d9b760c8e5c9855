"""Out-of-band surfaces under hostile input: x-callback targets that a browser (WHATWG URL) reads as another host than
Foundation does, images whose decoding or QR scan would run for minutes, and the messages for malformed JWEs, content
types and non-regular --qr-image paths. Each test fails on 633cbc3."""
import base64
import json
import os
import shutil
import struct
import subprocess
import urllib.parse
import zlib

import pytest
import segno

from test_uaf import home, tb  # noqa: F401 (fixtures)


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def payload(op="authentication", content_type="application/json", data=None):
    """A payload whose redeem URL is a closed loopback port: redeeming fails at once (exit 21), which runs the
    x-error callback, with no card and no server."""
    inner = {"token": "t-1", "redeem_url": f"http://127.0.0.1:9/nevisfido/token/redeem/{op}"}
    return {"nma_data": inner if data is None else data, "nma_data_content_type": content_type}


def allow(home, entries):
    os.makedirs(home["XDG_CONFIG_HOME"] + "/tokenbridge", exist_ok=True)
    with open(home["XDG_CONFIG_HOME"] + "/tokenbridge/config.json", "w") as f:
        json.dump({"callbackAllowList": entries}, f)


def whatwg(urls):
    """How a browser reads each URL (node's URL is the WHATWG URL Standard): (protocol, host) or None."""
    script = ("const r=[];for(const u of JSON.parse(process.argv[1])){try{const x=new URL(u);"
              "r.push([x.protocol,x.host])}catch(e){r.push(null)}};console.log(JSON.stringify(r))")
    out = subprocess.run(["node", "-e", script, json.dumps(urls)], capture_output=True, text=True, check=True)
    return [tuple(x) if x else None for x in json.loads(out.stdout)]


def callback(home, target):
    """What `oob --no-open` does with the x-error target `target`: ("opened", the string it would open) or
    ("refused", None)."""
    link = ("tokenbridge://x-callback-url/oob?dispatchTokenResponse=" + b64u(json.dumps(payload()).encode())
            + "&x-error=" + urllib.parse.quote(target, safe=""))
    r = tb(home, "oob", link, "--yes", "--no-open", timeout=30)
    assert r.returncode == 21, r.stderr  # the server cannot be reached: the error callback
    lines = r.stderr.splitlines()
    opened = [x[len("Callback: "):] for x in lines if x.startswith("Callback: ")]
    if opened:
        return "opened", opened[0]
    assert any(x.startswith("Not opened: ") for x in lines), r.stderr
    return "refused", None


HOSTILE = [
    "https://evil.example\\@bank.example/",  # the first case found: evil.example to a browser
    "https://evil.example\\\\@bank.example/", "https://evil.example:\\@bank.example/",
    "https://evil.example:443\\@bank.example/", "https:\\\\evil.example\\@bank.example/",
    "https:/\\evil.example\\@bank.example/", "HTTPS://EVIL.EXAMPLE\\@BANK.EXAMPLE/",
    "https://evil.example\t\\@bank.example/", "https://evil.example\n\\@bank.example/",
    " https://evil.example\\@bank.example/", "https://evil.example\\@bank.example/ ",
    "https://e%76il.example\\@bank.example/", "https://evil.example%5C@bank.example/",
    "https://evil.example%2F@bank.example/", "https://bank.example@evil.example/",
    "https://bank.example%40evil.example/", "https://0x7f.1\\@bank.example/", "https://2130706433\\@bank.example/",
    "https://\uff45vil.example\\@bank.example/", "https://evil.example\u3002\\@bank.example/",
    "https://evil.example\x00\\@bank.example/", "https://evil.example\x7f\\@bank.example/",
    "https://evil.example/\\..\\@bank.example", "https://evil.example\\/@bank.example",
    "https://[::1]\\@bank.example/", "https:evil.example\\@bank.example/", "https:///evil.example\\@bank.example/",
    "javascript:alert(1)//https://bank.example", "tokenbridge://x-callback-url/oob",
]


@pytest.mark.skipif(shutil.which("node") is None, reason="node (the WHATWG URL oracle) is not installed")
def test_a_callback_is_opened_only_when_a_browser_reads_an_allowed_origin(home):
    allow(home, ["bankapp:", "https://bank.example"])
    results = {t: callback(home, t) for t in HOSTILE}
    opened = [(t, s) for t, (kind, s) in results.items() if kind == "opened"]
    # What would be handed to xdg-open is read by a browser as the allowed origin, and it is the checked
    # serialization (nothing a browser would strip, nothing shown escaped).
    for (t, s), seen in zip(opened, whatwg([s for _, s in opened])):
        assert seen in (("https:", "bank.example"), ("bankapp:", "")), (t, s, seen)
        assert "\\" not in s and s.isprintable() and s.isascii() and s == s.strip(), (t, s)
    # That first case in particular is refused.
    assert results["https://evil.example\\@bank.example/"] == ("refused", None)
    # Plain targets are opened, normalised as a browser would.
    for target, shown in [("https://bank.example/done?x=1#f", "https://bank.example/done?x=1#f"),
                          ("https://BANK.Example:443/p", "https://bank.example/p"),
                          ("https://bank.example", "https://bank.example/"), ("bankapp://done", "bankapp://done")]:
        assert callback(home, target) == ("opened", shown), target


def png(width, height, row_at):
    """A grayscale PNG (`row_at(y)` the bytes of row y), compressed as it goes."""
    z = zlib.compressobj(6)
    data = b"".join(z.compress(b"\0" + row_at(y)) for y in range(height)) + z.flush()
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


def finder_tiles(tiles=400, scale=2, gap=2):
    """`tiles` x `tiles` QR finder patterns (a dark ring, a light ring, a 3x3 dark core), `gap` light modules
    apart, `scale` pixels a module: zbar's finder matching grows much faster than the image (22 s for 250 x 250
    here on 633cbc3; this one takes minutes)."""
    cell = 7 + gap
    tile_rows = []
    for y in range(cell):
        row = bytearray()
        for x in range(cell):
            inside = x < 7 and y < 7
            dark = inside and min(x, y, 6 - x, 6 - y) != 1
            row += bytes([0 if dark else 255]) * scale
        tile_rows.append(bytes(row) * tiles)
    size = tiles * cell * scale
    return png(size, size, lambda y: tile_rows[(y // scale) % cell])


def test_an_image_of_finder_patterns_is_given_up_at_the_timeout(home, tmp_path):
    image = tmp_path / "finders.png"
    image.write_bytes(finder_tiles())
    r = tb(home, "oob", "--decode-only", "--timeout", "1", "--qr-image", str(image), timeout=60)
    assert r.returncode == 31, r.stderr
    assert "Reading the image took longer than 1 s; crop it to the QR code. Nothing was done." in r.stderr


def progressive_jpeg(tmp_path, text, extra_scans):
    """A progressive gray JPEG of a QR code (cjpeg), its last scan repeated `extra_scans` times (libjpeg warns of a
    bogus progression and goes on: each scan is another pass over the whole image)."""
    ppm = tmp_path / "qr.pgm"
    m = segno.make_qr(text).matrix
    scale, border = 8, 4
    size = (len(m) + 2 * border) * scale
    pixels = bytearray()
    for y in range(size):
        my = y // scale - border
        for x in range(size):
            mx = x // scale - border
            dark = 0 <= my < len(m) and 0 <= mx < len(m) and m[my][mx]
            pixels.append(0 if dark else 255)
    ppm.write_bytes(b"P5 %d %d 255\n" % (size, size) + bytes(pixels))
    out = subprocess.run(["cjpeg", "-grayscale", "-progressive", str(ppm)], capture_output=True, check=True).stdout
    last_sos = out.rindex(b"\xff\xda")
    eoi = out.rindex(b"\xff\xd9")
    return out[:eoi] + out[last_sos:eoi] * extra_scans + out[eoi:]


@pytest.mark.skipif(shutil.which("cjpeg") is None, reason="cjpeg (libjpeg-turbo-progs) is not installed")
def test_a_progressive_jpeg_of_thousands_of_scans_is_refused(home, tmp_path):
    text = b64u(json.dumps(payload()).encode())
    image = tmp_path / "qr.jpg"
    image.write_bytes(progressive_jpeg(tmp_path, text, 3))  # a normal progressive JPEG is read
    r = tb(home, "oob", "--decode-only", "--qr-image", str(image), timeout=60)
    assert r.returncode == 0 and "operation: authentication" in r.stdout, r.stderr
    image.write_bytes(progressive_jpeg(tmp_path, text, 3000))
    r = tb(home, "oob", "--decode-only", "--qr-image", str(image), timeout=60)
    assert r.returncode == 31, r.stderr
    assert "The JPEG has more than 100 scans; save it as a PNG or a baseline JPEG. Nothing was done." in r.stderr


def test_a_qr_image_path_must_be_a_regular_file(home, tmp_path):
    message = "The path is a device, a FIFO or a socket; give the QR code as a PNG or JPEG file. Nothing was done."
    r = tb(home, "oob", "--decode-only", "--qr-image", "/dev/null", timeout=20)
    assert r.returncode == 31 and message in r.stderr, r.stderr
    fifo = tmp_path / "qr.png"
    os.mkfifo(fifo)  # no writer: a blocking open would wait forever
    r = tb(home, "oob", "--decode-only", "--qr-image", str(fifo), timeout=20)
    assert r.returncode == 31 and message in r.stderr, r.stderr
    r = tb(home, "oob", "--decode-only", "--qr-image", str(tmp_path), timeout=20)
    assert r.returncode == 64 and "Is a directory" in r.stderr, r.stderr


def test_a_push_path_must_be_a_regular_file(home, tmp_path):
    """--push FILE is read as --qr-image is: a FIFO without a writer blocked the open forever; now it, a device and a
    directory are refused at once, and a regular file still works."""
    fifo = tmp_path / "push.json"
    os.mkfifo(fifo)  # no writer: a blocking open would wait forever
    for path in (str(fifo), "/dev/null"):
        r = tb(home, "oob", "--decode-only", "--push", path, timeout=20)
        assert r.returncode == 64, r.stderr
        assert f"Cannot use {path}: it is a device, a FIFO or a socket, not a file." in r.stderr, r.stderr
    r = tb(home, "oob", "--decode-only", "--push", str(tmp_path), timeout=20)
    assert r.returncode == 64 and "Is a directory" in r.stderr, r.stderr
    regular = tmp_path / "regular.json"
    regular.write_text(json.dumps(payload()))
    r = tb(home, "oob", "--decode-only", "--push", str(regular), timeout=20)
    assert r.returncode == 0 and "operation: authentication" in r.stdout, r.stderr


def test_a_malformed_jwe_is_malformed_not_for_another_key(home):
    for jwe, reason in [("not-a-jwe", "is not a compact JWE (five parts separated by dots)"),
                        ("e30.....", "is not a compact JWE (five parts separated by dots)"),
                        ("!!.x.y.z.w", "has a protected header that is not base64url JSON")]:
        p = payload(content_type="application/jose", data=jwe)
        r = tb(home, "oob", "--decode-only", "--qr-text", b64u(json.dumps(p).encode()))
        assert r.returncode == 31, r.stderr
        assert f"The payload cannot be used: the encrypted nma_data {reason}. Nothing was done." in r.stderr


def test_the_content_type_must_be_the_media_type_itself(home):
    neither = "nma_data_content_type is neither application/json nor application/jose"
    for content_type, expected in [("application/jsonx", neither), ("application/json-seq", neither),
                                   ("application/josefoo", neither), ("application/json garbage", "is not a media type")]:
        r = tb(home, "oob", "--decode-only", "--qr-text", b64u(json.dumps(payload(content_type=content_type)).encode()))
        assert r.returncode == 31 and expected in r.stderr, (content_type, r.stderr)
    for content_type in ["application/json; charset=utf-8", "Application/JSON", 'application/json;x="a;b"']:
        r = tb(home, "oob", "--decode-only", "--qr-text", b64u(json.dumps(payload(content_type=content_type)).encode()))
        assert r.returncode == 0 and "operation: authentication" in r.stdout, (content_type, r.stderr)


def test_an_authentication_is_an_authentication(home):
    p = b64u(json.dumps(payload()).encode())
    r = tb(home, "oob", "--qr-text", p)
    assert r.returncode == 3, r.stderr
    assert "About to run an authentication at http://127.0.0.1:9, as the QR code or link asks." in r.stderr
