"""Concurrent runs and a hostile data directory: tokenbridge processes in parallel on one virtual card against
the reference RP, and local data that someone else could change."""
import json
import os
import sqlite3
import subprocess

from conftest import TOKENBRIDGE, pin_pipe, wait_until
from test_uaf import home, rp, tb  # noqa: F401 (fixtures)

PIN = "123456"


def start(home, *args, pins=None):
    """A tokenbridge run in the background; its PINs (if any) already waiting in a --pin-fd pipe."""
    cmd = [TOKENBRIDGE, *args]
    pass_fds = ()
    if pins is not None:
        r_fd = pin_pipe(pins)
        cmd += ["--pin-fd", str(r_fd)]
        pass_fds = (r_fd,)
    p = subprocess.Popen(cmd, env=dict(os.environ, **home), pass_fds=pass_fds, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    for fd in pass_fds:
        os.close(fd)
    return p


def finish(p):
    out, err = p.communicate(timeout=120)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def db_rows(home, sql):
    path = os.path.join(home["XDG_DATA_HOME"], "tokenbridge", "tokenbridge.sqlite")
    try:
        db = sqlite3.connect(path, timeout=5)
        try:
            return db.execute(sql).fetchall()
        finally:
            db.close()
    except sqlite3.Error:
        return None


def check_consistent(server, home):
    """Local data and the RP agree; no run left anything pending; no slot is held twice."""
    rows = json.loads(tb(home, "authenticators", "--all", "--json").stdout)
    assert {x["state"] for x in rows} <= {"registered", "abandoned"}, rows
    slots = [(x["token"], x["slot"]) for x in rows if x["slot"] != "-"]
    assert len(slots) == len(set(slots)), f"a slot given twice: {rows}"
    local = {(x["keyID"], x["username"]) for x in rows if x["state"] == "registered"}
    remote = {(x["keyID"], x["username"]) for x in server.registrations()}
    assert local == remote


def test_a_command_during_a_registration_leaves_it_alone(card, rp, home):  # noqa: F811
    server = rp()
    r_fd, w_fd = os.pipe()
    reg = subprocess.Popen([TOKENBRIDGE, "register", "--username", "alice", "--server", server.url, "--pin-fd",
                            str(r_fd)], env=dict(os.environ, **home), pass_fds=(r_fd,), stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    os.close(r_fd)
    try:
        # The registration has written its pending record and waits for the PIN.
        wait_until(lambda: db_rows(home, "SELECT state FROM authenticator") == [("pending",)],
                   "the pending registration", timeout=30)
        r = tb(home, "accounts", "--json")
        assert r.returncode == 0, r.stderr
        assert "interrupted" not in r.stderr
        os.write(w_fd, (PIN + "\n").encode())
    finally:
        os.close(w_fd)
    out, err = reg.communicate(timeout=120)
    assert reg.returncode == 0, err
    regs = server.registrations()
    assert [x["username"] for x in regs] == ["alice"]
    rows = json.loads(tb(home, "authenticators", "--all", "--json").stdout)
    assert [(x["keyID"], x["state"], x["slot"]) for x in rows] == [(regs[0]["keyID"], "registered", "82")]
    r = tb(home, "authenticate", "--username", "alice", "--server", server.url, pins=[PIN])
    assert r.returncode == 0, r.stderr


def test_parallel_registrations_authentications_and_listings(card, rp, home):  # noqa: F811
    server = rp()
    assert tb(home, "register", "--username", "alice", "--server", server.url, pins=[PIN]).returncode == 0
    for round in range(10):
        users = [f"u{round}a", f"u{round}b"]
        runs = [start(home, "register", "--username", u, "--server", server.url, pins=[PIN]) for u in users]
        runs.append(start(home, "authenticate", "--username", "alice", "--server", server.url, pins=[PIN]))
        runs.append(start(home, "accounts", "--json"))
        for r in map(finish, runs):
            assert r.returncode == 0, f"round {round}: {r.args[1]}: {r.stderr}"
            assert "interrupted" not in r.stderr
        check_consistent(server, home)
        # Each new key is in a slot of its own: it still signs for its registration.
        for u in users:
            r = tb(home, "authenticate", "--username", u, "--server", server.url, pins=[PIN])
            assert r.returncode == 0, f"round {round}: {u}: {r.stderr}"
        if round % 2 == 0:  # free the slots again every other round, so that reuse is contended too
            for u in users:
                r = tb(home, "deregister", "--username", u, "--server", server.url, pins=[PIN])
                assert r.returncode == 0, r.stderr
            check_consistent(server, home)
    assert tb(home, "authenticate", "--username", "alice", "--server", server.url, pins=[PIN]).returncode == 0


def test_unsafe_data_directory_is_refused(home, tmp_path):  # noqa: F811
    data = tmp_path / "data" / "tokenbridge"
    data.mkdir(parents=True)
    os.chmod(data, 0o777)
    r = tb(home, "accounts")
    assert r.returncode == 25, r.stderr
    assert f"Local data {data} is writable by other users (mode 777)" in r.stderr
    assert f"chmod go-w '{data}'" in r.stderr
    os.chmod(data, 0o700)
    assert tb(home, "accounts").returncode == 0
    db = data / "tokenbridge.sqlite"
    os.rename(db, tmp_path / "moved.sqlite")
    os.symlink(tmp_path / "moved.sqlite", db)
    r = tb(home, "accounts")
    assert r.returncode == 25 and f"Local data {db} is a symbolic link" in r.stderr


def test_data_directory_is_private_whatever_the_umask(home, tmp_path):  # noqa: F811
    r = subprocess.run([TOKENBRIDGE, "accounts"], env=dict(os.environ, **home), capture_output=True, text=True,
                       preexec_fn=lambda: os.umask(0), timeout=60)
    assert r.returncode == 0, r.stderr
    data = tmp_path / "data" / "tokenbridge"
    modes = {p.name: p.stat().st_mode & 0o777 for p in [data, *data.iterdir()]}
    assert modes == {"tokenbridge": 0o700, "tokenbridge.sqlite": 0o600, "tokenbridge.lock": 0o600}
