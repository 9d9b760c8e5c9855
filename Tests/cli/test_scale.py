"""Scale: 8 virtual cards and 4 virtual FIDO2 keys all listed by `tokens --json`, and 10,000 registrations all listed by
`accounts --json`, and the listing repeated 300 times without a failure. Correctness only: Tools/bench/scale measures
the time. The fixture runs beside a pcscd of its own with eight readers (a nested Tools/with-pcscd), so the session's
readers are not touched."""
import json
import subprocess
import sys

from conftest import ROOT, card_present
from scale_fixture import ACCOUNTS, CARDS, KEYS


def test_tokens_and_accounts_at_scale():
    r = subprocess.run([str(ROOT / "Tools" / "with-pcscd"), "--readers", str(CARDS), "--", sys.executable,
                        str(ROOT / "Tests" / "cli" / "scale_fixture.py"), "check"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert sorted(t for t in out["tokens"] if t.startswith("piv-")) == [f"piv-{6_100_000 + i}" for i in range(CARDS)]
    assert sorted(t for t in out["tokens"] if t.startswith("fido2-")) == sorted(
        f"fido2-key{i}-sock" for i in range(KEYS))
    assert len(out["tokens"]) == CARDS + KEYS
    # Listed again and again, all twelve every time (the parallel card probes and pcsc-lite's client: see there).
    assert out["repeated"]["failed"] == [] and out["repeated"]["runs"] >= 300, out["repeated"]
    accounts = out["accounts"]
    assert len(accounts) == ACCOUNTS
    assert {a["username"] for a in accounts} == {f"user{i:05d}" for i in range(ACCOUNTS)}
    # The session's own readers are as they were: empty (the fixture's eight are another pcscd's).
    assert not any(card_present(i) for i in range(2))
