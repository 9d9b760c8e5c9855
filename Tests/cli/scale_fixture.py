"""Many tokens and much local data, for Tests/cli/test_scale.py and Tools/bench/scale.

Runs inside `Tools/with-pcscd --readers 8`: the scale checked, 8 virtual cards + 4 virtual FIDO2 keys. Debian's vpcd
gives one driver entry two readers and keeps their state in the driver's globals; with-pcscd gives each further pair of
readers its own copy of the driver (see there), so one pcscd serves eight virtual cards.
Virtual cards and keys are real `virtual-token` processes; the 10,000 registrations are rows in the real
local-data database (made by tokenbridge itself, then filled with sqlite3 in one transaction: registering 10,000
times through a relying party would take an hour and test nothing more about listing them).

    Tools/with-pcscd --readers 8 -- python3 Tests/cli/scale_fixture.py check
        prints {"tokens": [...ids], "accounts": [...]} as JSON
"""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("TB_BIN", ROOT / ".build" / "debug"))
TOKENBRIDGE = str(BIN / "tokenbridge")
VIRTUAL_TOKEN = str(BIN / "virtual-token")
CARDS, KEYS, ACCOUNTS = 8, 4, 10_000


def reader_has_card(slot):
    """What pcscd says of vpcd reader `slot` (opensc-tool, not our code)."""
    return subprocess.run(["opensc-tool", "-r", str(slot), "-a"], capture_output=True).returncode == 0


class Tokens:
    """Starts virtual cards (one per vpcd reader) and virtual FIDO2 keys; `stop()` ends them by pid."""

    def __init__(self, work):
        self.work = Path(work)
        self.procs = []
        self.card_procs = {}
        self.sockets = []
        self.logs = []

    def env(self, home=None):
        e = dict(os.environ, TOKENBRIDGE_VIRTUAL_FIDO=":".join(self.sockets))
        e.update(home or {})
        return e

    def listed(self, home=None):
        r = subprocess.run([TOKENBRIDGE, "tokens", "--json"], capture_output=True, text=True, env=self.env(home),
                           stdin=subprocess.DEVNULL, timeout=60)
        return json.loads(r.stdout) if r.returncode == 0 else []

    cards = 0

    def add_card(self, i, latency=None):
        """Card i in vpcd reader i; `latency`: a `virtual-token --latency` profile (yubikey5), none by default."""
        self.cards = max(self.cards, i + 1)
        log = open(self.work / f"card{i}.log", "w")
        self.logs.append(log)
        self.procs.append(subprocess.Popen(
            [VIRTUAL_TOKEN, "piv", "--state", str(self.work / f"card{i}.json"), "--vpcd", f"127.0.0.1:{35963 + i}",
             "--serial", str(6_100_000 + i), *(["--latency", latency] if latency else [])], stderr=log))
        self.card_procs[i] = self.procs[-1]

    def take_out(self, cards):
        """Takes the cards `cards` (indexes) out of their readers (virtual-token piv: SIGUSR1); `put_in` puts them
        back (SIGUSR2). pcscd sees either at its next vpcd poll: `wait` for it."""
        for i in cards:
            self.card_procs[i].send_signal(signal.SIGUSR1)

    def put_in(self, cards):
        for i in cards:
            self.card_procs[i].send_signal(signal.SIGUSR2)

    def add_key(self, i, latency=None):
        sock = str(self.work / f"key{i}.sock")
        log = open(sock + ".log", "w")
        self.logs.append(log)
        self.procs.append(subprocess.Popen(
            [VIRTUAL_TOKEN, "fido2", "--socket", sock, "--state", str(self.work / f"key{i}.json"),
             *(["--latency", latency] if latency else [])], stderr=log))
        self.sockets.append(sock)

    def wait(self, cards, keys, timeout=30.0):
        """Until `tokens --json` lists `cards` PIV cards and `keys` FIDO2 keys (pcscd polls vpcd every 400 ms)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if all(os.path.exists(s) for s in self.sockets):
                kinds = [t["kind"] for t in self.listed()]
                if kinds.count("piv") == cards and kinds.count("fido2") == keys:
                    return
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {cards} cards and {keys} keys: {self.listed()}")

    def stop(self):
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            p.wait(timeout=10)
        for log in self.logs:
            log.close()
        # pcscd notices a card's process is gone at its next vpcd poll (up to 400 ms later); until then the reader
        # still shows a card. Wait for that, or the next test's new card looks present at once and its first
        # command finds the reader empty (the test_selection flake of sessions 3 to 6).
        end = time.monotonic() + 10
        while any(reader_has_card(i) for i in range(self.cards)):
            if time.monotonic() > end:
                raise AssertionError("pcscd still shows a stopped card")
            time.sleep(0.05)


def fill_accounts(home, n=ACCOUNTS):
    """n registrations (n accounts) in the local data of `home` (XDG_DATA_HOME/XDG_CONFIG_HOME)."""
    r = subprocess.run([TOKENBRIDGE, "accounts", "--json"], capture_output=True, text=True,
                       env=dict(os.environ, **home), stdin=subprocess.DEVNULL, timeout=60)
    assert r.returncode == 0, r.stderr  # creates the database with every migration
    [db] = Path(home["XDG_DATA_HOME"], "tokenbridge").glob("*.sqlite")
    with sqlite3.connect(db) as c:
        c.executemany(
            "INSERT INTO authenticator (keyID, aaid, username, server, appID, tokenID, slot, publicKey, signCounter,"
            " state, createdAt, credentialID, hmacSalt) VALUES (?, 'ABCD#0001', ?, 'https://rp.example', "
            "'https://rp.example/app', 'fido2-key0-sock', -1, ?, 0, 'registered', '2026-01-01 00:00:00.000', ?, ?)",
            [(f"key-{i:05d}", f"user{i:05d}", bytes(65), bytes(16), bytes(32)) for i in range(n)])


def check():
    with tempfile.TemporaryDirectory() as work:
        tokens = Tokens(work)
        try:
            for i in range(CARDS):
                tokens.add_card(i)
            for i in range(KEYS):
                tokens.add_key(i)
            tokens.wait(CARDS, KEYS)
            listed = [t["id"] for t in tokens.listed()]
            repeated = repeat_listing(tokens)
        finally:
            tokens.stop()
        home = {"XDG_DATA_HOME": f"{work}/data", "XDG_CONFIG_HOME": f"{work}/config"}
        fill_accounts(home)
        r = subprocess.run([TOKENBRIDGE, "accounts", "--json"], capture_output=True, text=True,
                           env=dict(os.environ, **home), stdin=subprocess.DEVNULL, timeout=60)
        assert r.returncode == 0, r.stderr
        print(json.dumps({"tokens": listed, "accounts": json.loads(r.stdout), "repeated": repeated}))


REPEATS = 300


def repeat_listing(tokens):
    """`tokens --json` REPEATS times: each run's exit status and count when it did not list all twelve. The card
    probes run in parallel threads, and pcsc-lite's client is not safe against a card disconnected or a context
    released in one thread while another is inside it: when the probing threads disconnected their cards, one run
    in about 600 crashed (SIGSEGV in SCardDisconnect)."""
    failed = []
    for _ in range(REPEATS):
        r = subprocess.run([TOKENBRIDGE, "tokens", "--json"], capture_output=True, text=True, env=tokens.env(),
                           stdin=subprocess.DEVNULL, timeout=60)
        n = len(json.loads(r.stdout)) if r.returncode == 0 else None
        if n != CARDS + KEYS:
            failed.append({"rc": r.returncode, "listed": n, "stderr": r.stderr[-300:]})
    return {"runs": REPEATS, "failed": failed}


if __name__ == "__main__" and sys.argv[1:] == ["check"]:
    check()
