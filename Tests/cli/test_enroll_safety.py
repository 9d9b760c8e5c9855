"""`enroll --reset` reads and rewrites the remembered decisions (enrollment.json in the data directory) only when the
directory and the file pass the checks every other command applies to its local data: a symbolic link, another user's or
a group/world-writable one is refused with the local-data message (exit 25), and nothing is read or written through it.
(The lock directory's checks: Tests/TokenBridgeTests/EnrollmentLockTests, which need a USB device from a sysfs tree of
their own.)"""
import json
import os

import pytest

from test_uaf import home, tb  # noqa: F401 (fixtures)

KEY = "usb-1209-0001-port-1-2"
REMEMBERED = {KEY: "declined", "usb-1209-0001-20000001": "enrolled"}


def data_dir(home):
    return os.path.join(home["XDG_DATA_HOME"], "tokenbridge")


def write_memory(directory):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "enrollment.json")
    with open(path, "w") as f:
        json.dump(REMEMBERED, f)
    os.chmod(path, 0o600)
    return path


def reset(home):
    return tb(home, "enroll", "--reset", KEY)


def test_reset_forgets_in_a_safe_data_directory(home):
    os.makedirs(data_dir(home), mode=0o700)
    path = write_memory(data_dir(home))
    r = reset(home)
    assert r.returncode == 0 and f"Forgot {KEY}" in r.stdout + r.stderr, r.stdout + r.stderr
    assert json.load(open(path)) == {"usb-1209-0001-20000001": "enrolled"}
    assert oct(os.stat(path).st_mode & 0o7777) == oct(0o600)
    assert sorted(os.listdir(data_dir(home))) == ["enrollment.json"]  # no temporary file left


def test_reset_refuses_a_symlinked_data_directory(home, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    path = write_memory(str(elsewhere))
    os.makedirs(home["XDG_DATA_HOME"])
    os.symlink(elsewhere, data_dir(home))
    r = reset(home)
    assert r.returncode == 25, r.stdout + r.stderr
    assert f"Local data {data_dir(home)} is a symbolic link, so it is not used." in r.stderr
    assert json.load(open(path)) == REMEMBERED
    assert os.listdir(elsewhere) == ["enrollment.json"]


def test_reset_refuses_a_symlinked_memory_file(home, tmp_path):
    victim = tmp_path / "victim.json"
    victim.write_text(json.dumps(REMEMBERED))
    os.makedirs(data_dir(home), mode=0o700)
    os.symlink(victim, os.path.join(data_dir(home), "enrollment.json"))
    r = reset(home)
    assert r.returncode == 25, r.stdout + r.stderr
    assert "enrollment.json is a symbolic link, so it is not used." in r.stderr
    assert json.loads(victim.read_text()) == REMEMBERED
    assert os.path.islink(os.path.join(data_dir(home), "enrollment.json"))


def test_reset_refuses_a_world_writable_data_directory(home):
    os.makedirs(data_dir(home))
    os.chmod(data_dir(home), 0o777)
    path = write_memory(data_dir(home))
    r = reset(home)
    assert r.returncode == 25, r.stdout + r.stderr
    assert f"Local data {data_dir(home)} is writable by other users (mode 777)" in r.stderr
    assert json.load(open(path)) == REMEMBERED


def test_reset_refuses_a_group_writable_memory_file(home):
    os.makedirs(data_dir(home), mode=0o700)
    path = write_memory(data_dir(home))
    os.chmod(path, 0o620)
    r = reset(home)
    assert r.returncode == 25, r.stdout + r.stderr
    assert "enrollment.json is writable by other users (mode 620)" in r.stderr
    assert json.load(open(path)) == REMEMBERED


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a directory to another user")
def test_reset_refuses_a_data_directory_of_another_user(home):
    os.makedirs(data_dir(home), mode=0o700)
    path = write_memory(data_dir(home))
    os.chown(data_dir(home), 4242, 4242)
    r = reset(home)
    assert r.returncode == 25, r.stdout + r.stderr
    assert f"Local data {data_dir(home)} belongs to another user (uid 4242)" in r.stderr
    assert json.load(open(path)) == REMEMBERED
