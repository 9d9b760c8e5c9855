"""A FIDO2 key that accepts and then says nothing: it must not hang commands about other tokens, `tokens` must list it
as not answering, and a command about it must end with a clear error.

The stalled keys are Python SOCK_SEQPACKET listeners named in TOKENBRIDGE_VIRTUAL_FIDO: "silent" accepts and
never answers (not even CTAPHID_INIT), "after-init" answers INIT correctly and then goes silent (libfido2's
getInfo inside fido_dev_open waits). The subprocess timeout of `tb` is only a hang guard; nothing here
measures time."""
import contextlib
import os
import subprocess
import sys

import pytest

from conftest import tb, wait_until

STALLED_KEY = r'''
import socket, sys
path, mode = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind(path); s.listen(16)
open(path + ".ready", "w").close()
held = []
while True:
    c, _ = s.accept()
    held.append(c)  # never closed: the client sees silence, not an error
    if mode == "after-init":
        f = c.recv(65)
        if len(f) == 65: f = f[1:]
        if f[4] == 0x86:  # INIT: a correct answer (CBOR capable), then nothing more on this connection
            body = f[7:15] + b"\x00\x00\x00\x07" + bytes([2, 0, 2, 1, 0x0D])
            c.send((f[:4] + bytes([0x86, 0, len(body)]) + body).ljust(64, b"\0"))
'''

# How long a hang guard waits: far above the 3 s probe deadline, far below "forever".
GUARD = 60


# The operation that finds the silence: CTAPHID_INIT inside the open, or the getInfo after a good INIT.
OPERATION = {"silent": "open", "after-init": "getInfo"}


class Stalled(str):
    operation = ""


@contextlib.contextmanager
def stalled_key(path, mode):
    """A key listening at `path` that answers as `mode` says ("silent", "after-init"); killed at the end."""
    proc = subprocess.Popen([sys.executable, "-c", STALLED_KEY, path, mode])
    try:
        wait_until(lambda: os.path.exists(path + ".ready"), "stalled key")
        yield path
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(params=["silent", "after-init"])
def stalled(request, tmp_path):
    path = Stalled(tmp_path / "stall.sock")
    path.operation = OPERATION[request.param]
    with stalled_key(path, request.param):
        yield path


@pytest.mark.parametrize("named", [True, False])
def test_pin_status_of_a_piv_card_is_not_blocked_by_a_stalled_key(card, stalled, named):
    # Named: the stalled key is not even probed. Not named: it is probed, runs out of time, and the PIV card is
    # the one usable token.
    args = ["--token", card.id] if named else []
    r = tb("pin", "status", *args, env={"TOKENBRIDGE_VIRTUAL_FIDO": stalled}, timeout=GUARD)
    assert r.returncode == 0, r.stderr
    assert card.id in r.stdout and "3 tries left" in r.stdout, r.stdout


def test_tokens_lists_the_stalled_key_as_not_answering(card, stalled):
    r = tb("tokens", env={"TOKENBRIDGE_VIRTUAL_FIDO": stalled}, timeout=GUARD)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(card.id), r.stdout  # the PIV card is listed as usual
    assert f"({stalled}: The token did not answer ({stalled.operation}) in time" in r.stdout, r.stdout
    assert "fido2-stall-sock" not in r.stdout.split("(")[0]  # not listed as a usable key


def test_a_command_about_the_stalled_key_ends_with_a_clear_error(stalled):
    r = tb("pin", "status", "--token", "fido2-stall-sock", env={"TOKENBRIDGE_VIRTUAL_FIDO": stalled}, timeout=GUARD)
    assert r.returncode == 14, (r.returncode, r.stderr)
    assert f"The token did not answer ({stalled.operation}) in time: remove and re-insert it" in r.stderr, r.stderr
