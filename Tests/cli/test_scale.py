"""Scale (issue 12, item 5): 2 virtual cards and 10 virtual FIDO2 keys (12 tokens; see scale_fixture.py for why
not 8 + 4) all listed by `tokens --json`, and 10,000 registrations all listed by `accounts --json`. Correctness
only: Tools/bench/scale measures the time."""
import json
import subprocess
import sys

from conftest import ROOT, card_present
from scale_fixture import ACCOUNTS, CARDS, KEYS


def test_tokens_and_accounts_at_scale():
    r = subprocess.run([sys.executable, str(ROOT / "Tests" / "cli" / "scale_fixture.py"), "check"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert sorted(t for t in out["tokens"] if t.startswith("piv-")) == [f"piv-{6_100_000 + i}" for i in range(CARDS)]
    assert sorted(t for t in out["tokens"] if t.startswith("fido2-")) == sorted(
        f"fido2-key{i}-sock" for i in range(KEYS))
    assert len(out["tokens"]) == CARDS + KEYS
    accounts = out["accounts"]
    assert len(accounts) == ACCOUNTS
    assert {a["username"] for a in accounts} == {f"user{i:05d}" for i in range(ACCOUNTS)}
    # Its cards are gone from pcscd's view when it returns: a card stopped without waiting stayed in the reader
    # until pcscd's next poll, and the next test's new card looked present at once (the test_selection flake).
    assert not any(card_present(i) for i in range(CARDS))
