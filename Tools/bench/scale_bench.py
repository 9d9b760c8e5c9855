"""Runs inside Tools/with-pcscd. See Tools/bench/scale."""
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "Tests", "cli"))
from scale_fixture import ACCOUNTS, CARDS, KEYS, TOKENBRIDGE, Tokens, fill_accounts  # noqa: E402

ROWS = "--rows" in sys.argv
args = [a for a in sys.argv[1:] if a != "--rows"]
ROUNDS = int(args[0]) if args else 10


def median_ms(cmd, env, expect=None):
    times = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, env=env, stdin=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
        if p.returncode != 0:
            sys.exit(f"bench: {cmd} failed: {p.stderr.decode()}")
        if expect is not None:
            expect(p.stdout)
    return statistics.median(times) * 1000


def count(n, kind=None):
    import json

    def check(out):
        got = [t for t in json.loads(out) if kind is None or t["kind"] == kind]
        assert len(got) == n, f"listed {len(got)}, expected {n}"
    return check


with tempfile.TemporaryDirectory() as work:
    tokens = Tokens(work)
    try:
        tokens.add_card(0)
        tokens.wait(1, 0)
        one = median_ms([TOKENBRIDGE, "tokens", "--json"], tokens.env(), count(1))
        for i in range(1, CARDS):
            tokens.add_card(i)
        for i in range(KEYS):
            tokens.add_key(i)
        tokens.wait(CARDS, KEYS)
        many = median_ms([TOKENBRIDGE, "tokens", "--json"], tokens.env(), count(CARDS + KEYS))
    finally:
        tokens.stop()
    home = {"XDG_DATA_HOME": f"{work}/data", "XDG_CONFIG_HOME": f"{work}/config"}
    fill_accounts(home)
    accounts = median_ms([TOKENBRIDGE, "accounts", "--json"], dict(os.environ, **home), count(ACCOUNTS))

ratio = many / one
if ROWS:
    print(f"tokens --json, {CARDS} cards + {KEYS} keys (peer: ours, 1 card)\t{many:.1f} ms\t{one:.1f} ms\t"
          f"{ratio:.2f}\t-\t<= 2.00x\t{'yes' if ratio <= 2.0 else 'no'}")
    print(f"accounts --json, {ACCOUNTS} registrations (absolute)\t{accounts:.1f} ms\t-\t-\t-\t<= 100 ms\t"
          f"{'yes' if accounts <= 100 else 'no'}")
else:
    print(f"tokenbridge at scale, {ROUNDS} rounds each (median; each a new process)")
    print(f"tokens --json  1 card: {one:6.1f} ms   {CARDS} cards + {KEYS} keys: {many:6.1f} ms   "
          f"(ratio {ratio:4.2f}; goal <= 2.00, our own one-token run is the baseline)")
    print(f"accounts --json with {ACCOUNTS} registrations: {accounts:6.1f} ms (goal <= 100 ms, absolute)")
