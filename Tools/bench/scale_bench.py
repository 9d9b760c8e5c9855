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


def median_ms(cmd, env, expect=None, warm_up=3):
    """Median of ROUNDS runs, after `warm_up` runs not counted (the first runs after tokens appear were seen up to
    twice as slow: a baseline caught there would flatter the ratio)."""
    times = []
    for i in range(warm_up + ROUNDS):
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, env=env, stdin=subprocess.DEVNULL)
        if i >= warm_up:
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
        tokens.add_key(0)
        tokens.wait(0, 1)
        one_key = median_ms([TOKENBRIDGE, "tokens", "--json"], tokens.env(), count(1))
        no_keys = dict(tokens.env(), TOKENBRIDGE_VIRTUAL_FIDO="")  # keys hidden: PC/SC only, libfido2 not loaded
        tokens.add_card(0)
        tokens.wait(1, 1)
        one = median_ms([TOKENBRIDGE, "tokens", "--json"], no_keys, count(1))
        for i in range(1, CARDS):
            tokens.add_card(i)
        for i in range(1, KEYS):
            tokens.add_key(i)
        tokens.wait(CARDS, KEYS)
        many = median_ms([TOKENBRIDGE, "tokens", "--json"], tokens.env(), count(CARDS + KEYS))
        cards_only = median_ms([TOKENBRIDGE, "tokens", "--json"], no_keys, count(CARDS))
    finally:
        tokens.stop()
    home = {"XDG_DATA_HOME": f"{work}/data", "XDG_CONFIG_HOME": f"{work}/config"}
    fill_accounts(home)
    accounts = median_ms([TOKENBRIDGE, "accounts", "--json"], dict(os.environ, **home), count(ACCOUNTS))

ratio = many / one
# Where the time goes, for a missed goal: the cards alone against one card, and what the keys add (the first key
# loads libfido2 and libcrypto, which the one-card run never loads).
why = (f"{CARDS} cards alone {cards_only:.1f} ms ({cards_only / one:.2f}x); the {KEYS} keys add "
       f"{many - cards_only:.1f} ms (libfido2 + libcrypto loaded; 1 key alone {one_key:.1f} ms)")
if ROWS:
    print(f"tokens --json, {CARDS} cards + {KEYS} keys (peer: ours, 1 card)\t{many:.1f} ms\t{one:.1f} ms\t"
          f"{ratio:.2f}\t-\t<= 2.00x\t{'yes' if ratio <= 2.0 else 'no'}\t{'' if ratio <= 2.0 else why}")
    print(f"accounts --json, {ACCOUNTS} registrations (absolute)\t{accounts:.1f} ms\t-\t-\t-\t<= 100 ms\t"
          f"{'yes' if accounts <= 100 else 'no'}")
else:
    print(f"tokenbridge at scale, {ROUNDS} rounds each (median; each a new process)")
    print(f"tokens --json  1 card: {one:6.1f} ms   {CARDS} cards + {KEYS} keys: {many:6.1f} ms   "
          f"(ratio {ratio:4.2f}; goal <= 2.00, our own one-card run is the baseline)")
    print(f"               1 key: {one_key:6.1f} ms   {CARDS} cards alone: {cards_only:6.1f} ms "
          f"({cards_only / one:4.2f}x one card)   12 tokens vs one key: {many / one_key:4.2f}x")
    print(f"accounts --json with {ACCOUNTS} registrations: {accounts:6.1f} ms (goal <= 100 ms, absolute)")
