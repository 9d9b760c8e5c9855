"""tokenbridge doctor's checks that need no lab (the private pcscd with vpcd is enough), each failure induced for
real: the card held exclusively by a process named scdaemon (named, with its pid), an invalid configuration, an
unsafe data directory, the enrollment unit missing while enrollment is configured. (The udev rules are not
installed on the build host: that check fails here by design; Tests/lab/test_doctor.py covers it.)"""
import json
import os
import subprocess
import time

from conftest import tb

HOLDER = r"""
import ctypes, sys, time
libc = ctypes.CDLL(None)
libc.prctl(15, b"scdaemon", 0, 0, 0)  # PR_SET_NAME: /proc/PID/comm says scdaemon, as gpg's would
lib = ctypes.CDLL("libpcsclite.so.1")
ctx = ctypes.c_long(); card = ctypes.c_long(); proto = ctypes.c_ulong()
assert lib.SCardEstablishContext(2, None, None, ctypes.byref(ctx)) == 0
rv = lib.SCardConnect(ctx, sys.argv[1].encode(), 1, 3, ctypes.byref(card), ctypes.byref(proto))  # 1: EXCLUSIVE
print("held" if rv == 0 else "connect failed %x" % (rv & 0xffffffff), flush=True)
time.sleep(120)
"""


def doctor(tmp_path, env=None):
    home = tmp_path / "home"
    base = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local/share")}
    r = tb("doctor", "--json", env=dict(base, **(env or {})))
    assert r.returncode in (0, 35), r.stderr
    return r.returncode, {c["name"]: c for c in json.loads(r.stdout)}


# A process named like a card tool that does not use PC/SC at all: not the holder, not to be named.
DECOY = r"""
import ctypes, sys, time
ctypes.CDLL(None).prctl(15, b"ykman", 0, 0, 0)
print("up", flush=True)
time.sleep(120)
"""


def test_card_held_by_scdaemon_is_named(card, tmp_path):
    decoy = subprocess.Popen(["python3", "-c", DECOY], stdout=subprocess.PIPE, text=True)
    holder = subprocess.Popen(["python3", "-c", HOLDER, card.reader], stdout=subprocess.PIPE, text=True)
    try:
        assert decoy.stdout.readline() == "up\n"
        assert holder.stdout.readline() == "held\n"
        rc, checks = doctor(tmp_path)
    finally:
        for p in (holder, decoy):
            p.kill()
            p.wait()
    assert rc == 35
    access = checks["card access"]
    assert not access["ok"]
    assert access["detail"] == (f"the card in {card.reader} is held exclusively by another program: running "
                                f"scdaemon (pid {holder.pid})")
    assert access["fix"].startswith("end that program (gpgconf --kill scdaemon)")
    # Released: the check passes again, once pcscd has handled the holder's closed socket (it does so on its own
    # thread: a doctor run at once can still find the card held, by nobody; bounded).
    for _ in range(50):
        rc, checks = doctor(tmp_path)
        if "card access" not in checks:
            break
        time.sleep(0.2)
    assert "card access" not in checks and checks["pcscd"]["ok"], checks.get("card access")


def test_invalid_configuration(tmp_path):
    conf = tmp_path / "home" / ".config" / "tokenbridge"
    conf.mkdir(parents=True)
    (conf / "config.json").write_text('{"server": 12}')
    rc, checks = doctor(tmp_path)
    assert rc == 35
    c = checks["configuration"]
    assert not c["ok"] and "server" in c["detail"], c
    (conf / "config.json").write_text('{"server": "https://example.test"}')
    rc, checks = doctor(tmp_path)
    assert checks["configuration"]["ok"], checks["configuration"]


def test_unsafe_data_directory(tmp_path):
    data = tmp_path / "home" / ".local" / "share" / "tokenbridge"
    data.mkdir(parents=True)
    os.chmod(data, 0o777)
    rc, checks = doctor(tmp_path)
    assert rc == 35
    c = checks["data directory"]
    assert not c["ok"] and c["fix"].startswith("fix the directory"), c
    os.chmod(data, 0o700)
    rc, checks = doctor(tmp_path)
    assert checks["data directory"]["ok"], checks["data directory"]


def test_enrollment_unit_missing_while_enroll_is_configured(tmp_path):
    conf = tmp_path / "home" / ".config"
    (conf / "tokenbridge").mkdir(parents=True)
    rc, checks = doctor(tmp_path)
    assert checks["enrollment unit"]["ok"]  # nothing configured: not needed
    (conf / "tokenbridge" / "config.json").write_text('{"enroll": {"server": "https://example.test"}}')
    rc, checks = doctor(tmp_path)
    assert rc == 35
    c = checks["enrollment unit"]
    assert not c["ok"] and c["detail"] == "\"enroll\" is configured but tokenbridge-enroll@.service is not installed"
    assert c["fix"] == "Tools/install-udev"
    (conf / "systemd" / "user").mkdir(parents=True)
    (conf / "systemd" / "user" / "tokenbridge-enroll@.service").write_text("[Service]\n")
    rc, checks = doctor(tmp_path)
    assert checks["enrollment unit"]["ok"], checks["enrollment unit"]
