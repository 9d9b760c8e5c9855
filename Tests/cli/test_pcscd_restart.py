"""virtual-token reconnects when pcscd restarts (a desktop's pcscd is restarted by updates and suspend)."""
import subprocess

from conftest import ROOT, TOKENBRIDGE, VIRTUAL_TOKEN

SCRIPT = r"""
set -u
"$VT" piv --state "$TB_RUN_DIR/card.json" --serial 7700001 2>/dev/null &
card=$!
trap 'kill $card 2>/dev/null; [ -n "${new:-}" ] && kill $new 2>/dev/null; wait' EXIT
for i in $(seq 50); do "$TB" tokens | grep -q piv-7700001 && break; sleep 0.1; done
"$TB" tokens | grep -q piv-7700001 || { echo "card never appeared"; exit 1; }
# pcscd is with-pcscd's child, not this shell's (wait cannot wait for it): until it has exited (gone, or a zombie
# its parent has not reaped yet) it may still answer.
kill "$TB_PCSCD_PID"
for i in $(seq 100); do grep -qs '^State:[[:space:]]*[^Z]' "/proc/$TB_PCSCD_PID/status" || break; sleep 0.1; done
"$TB" tokens >/dev/null 2>&1; echo "without pcscd: $?"
pcscd -f -c "$TB_RUN_DIR/reader.conf" >/dev/null 2>&1 &
new=$!
for i in $(seq 100); do "$TB" tokens 2>/dev/null | grep -q piv-7700001 && break; sleep 0.1; done
"$TB" tokens | grep piv-7700001
"""


def test_card_comes_back_after_pcscd_restart():
    r = subprocess.run([str(ROOT / "Tools" / "with-pcscd"), "--", "bash", "-c", SCRIPT], capture_output=True,
                       text=True, timeout=120, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "TB": TOKENBRIDGE,
                                                    "VT": VIRTUAL_TOKEN})
    assert "without pcscd: 5" in r.stdout, r.stdout + r.stderr
    assert "piv-7700001  YubiKey 5.4.3" in r.stdout, r.stdout + r.stderr
    assert r.returncode == 0
