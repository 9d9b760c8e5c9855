"""Eight PIV cards, eight `tokenbridge pin change --token piv-N` at once, 50 times over (400 runs): none may hang,
none may crash (end by a signal), each says "PIN changed.". Runs beside a pcscd of its own with eight readers (a
nested Tools/with-pcscd, as test_scale.py), so the session's readers are not touched.

Two faults this guards (HardwareNotes.md, PC/SC): discovery kept each probed card's transaction while it waited for
the next card, so processes that probed the same cards in another order waited for each other for good (the first
round hung); and a probing thread could free the sessions it had handed over (disconnect their cards, release their
context) after the command had moved on, inside pcsc-lite beside it or while the process exited (SIGSEGV after
"PIN changed.")."""
import json
import subprocess
import sys

from conftest import ROOT, card_present

ROUNDS = 50


def test_parallel_pin_changes_on_eight_cards_neither_hang_nor_crash():
    r = subprocess.run([str(ROOT / "Tools" / "with-pcscd"), "--readers", "8", "--", sys.executable,
                        str(ROOT / "Tests" / "cli" / "many_cards.py"), str(ROUNDS)],
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["hung"] == 0 and out["crashed"] == 0, out
    assert out["failed"] == [] and out["runs"] == 8 * ROUNDS, out
    assert not any(card_present(i) for i in range(2))  # the session's own readers: untouched
