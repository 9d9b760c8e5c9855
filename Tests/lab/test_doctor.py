"""tokenbridge doctor in the lab: healthy with a composite token, then each failure it claims to detect induced
for real (another user without access to the hidraw node, a card held exclusively by a process named scdaemon,
a key udev did not mark, a node libfido2 does not list, our rules missing or older than the binary, pcscd
stopped). Tests/lab/guest_doctor.sh drives it."""
import re

from conftest import ROOT


def cases(text):
    out = {}
    for block in text.split("== ")[1:]:
        head, _, body = block.partition("\n")
        name, rc = head.split(" rc=")
        out[name] = (int(rc), body)
    return out


def failing(body):
    return [l.split(":")[0][5:] for l in body.splitlines() if l.startswith("FAIL ")]


def test_doctor_finds_each_problem(devices):
    r = devices.run(str(ROOT / "Tests" / "lab" / "guest_doctor.sh"), attach=["composite"], timeout=600)
    assert r.returncode == 0, r.stdout[-3000:]
    c = cases(r.stdout)
    rc, body = c["healthy"]
    assert rc == 0 and failing(body) == [], body
    assert "ok   key access: /dev/hidraw0: usable" in body and re.search(r"ok   pcscd: reachable \(pcsc-lite [0-9.]+\)", body)
    rc, body = c["other-user"]
    assert rc == 35 and failing(body) == ["key access"], body
    assert "/dev/hidraw0: no read/write access for this user" in body
    held = re.search(r"^holder-pid=(\d+) holder: (.*)$", r.stdout, re.M)
    assert held and held.group(2) == "held", f"the scdaemon stand-in did not take the card: {held and held.group(2)}"
    holder = held.group(1)
    rc, body = c["card-held"]
    assert rc == 35 and failing(body) == ["card access"], body
    assert f"is held exclusively by another program: running scdaemon (pid {holder})" in body, body
    rc, body = c["unmarked"]
    assert rc == 35 and failing(body) == ["udev"], body
    assert "FAIL udev: hidraw0 is a FIDO key but udev did not mark it (ID_FIDO_TOKEN)" in body
    rc, body = c["unlisted"]
    assert rc == 35 and failing(body) == ["libfido2"], body
    assert "FAIL libfido2: hidraw0 is a FIDO key libfido2 does not list" in body
    rc, body = c["old-rules"]
    assert rc == 35 and failing(body) == ["udev rules"], body
    assert "is older than this tokenbridge (version 1, want 2)" in body
    rc, body = c["no-rules"]
    assert rc == 35 and failing(body) == ["udev rules"], body
    rc, body = c["no-pcscd"]
    assert rc == 35 and failing(body) == ["pcscd"], body
