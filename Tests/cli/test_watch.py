"""tokenbridge watch (PC/SC card events through vpcd, virtual FIDO2 key plug/unplug, pcscd restarted under it,
Ctrl-C/SIGTERM exit 0) and --wait (a command waits for its token instead of failing; timeout is exit 14)."""
import json
import os
import queue
import signal
import subprocess
import threading
import time

import pytest

from conftest import ROOT, TOKENBRIDGE, VIRTUAL_TOKEN, tb
from fido2_conn import Key


class Watch:
    """`tokenbridge watch` in the background; its stdout lines and stderr collected by threads."""

    def __init__(self, *args, env=None):
        self.proc = subprocess.Popen([TOKENBRIDGE, "watch", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=dict(os.environ, **(env or {})), start_new_session=True)
        self.lines = queue.Queue()
        self.stderr = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr.append), daemon=True).start()
        self.seen = []
        end = time.monotonic() + 20
        while not any("watching" in l for l in self.stderr):
            assert time.monotonic() < end and self.proc.poll() is None, "".join(self.stderr)
            time.sleep(0.05)

    @staticmethod
    def _pump(stream, put):
        for line in stream:
            put(line.rstrip("\n"))

    def expect(self, pred, what, timeout=20):
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {what}; seen: {self.seen}; stderr: {self.stderr}")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            self.seen.append(line)
            if pred(line):
                return line

    def end(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=20)


def starts(prefix):
    return lambda line: line.startswith(prefix)


def test_watch_follows_cards_and_fido2_keys(cards, tmp_path):
    card = cards()
    sock = str(tmp_path / "fido.sock")
    w = Watch(env={"TOKENBRIDGE_VIRTUAL_FIDO": sock})
    w.expect(starts("present piv-5000000 capabilities=piv"), "present event for the card")
    card.remove()
    w.expect(lambda l: l == "removed piv-5000000", "removal of the card")
    card.proc.send_signal(signal.SIGUSR2)  # re-inserted
    w.expect(starts("added piv-5000000 capabilities=piv source=\"Virtual PCD 00 00\""), "card inserted again")
    key = Key(tmp_path)
    try:
        w.expect(starts("added fido2-fido-sock capabilities=fido2"), "the FIDO2 key plugged in")
        key.replug()
        w.expect(lambda l: l == "removed fido2-fido-sock", "the FIDO2 key unplugged")
        w.expect(starts("added fido2-fido-sock"), "the FIDO2 key back")
    finally:
        key.stop()
    assert w.end(signal.SIGTERM) == 0
    # No event was reported twice, none invented.
    assert [l.split()[0] for l in w.seen] == ["present", "removed", "added", "added", "removed", "added"], w.seen


def test_watch_json_and_ctrl_c(cards):
    w = Watch("--json")
    card = cards(serial=5000042)
    event = json.loads(w.expect(lambda l: '"added"' in l, "the added event"))
    assert event == {"event": "added", "token": "piv-5000042", "ids": ["piv-5000042"], "capabilities": ["piv"],
                     "source": "Virtual PCD 00 00"}
    card.remove()
    assert json.loads(w.expect(lambda l: '"removed"' in l, "the removed event")) == {
        "event": "removed", "token": "piv-5000042", "ids": ["piv-5000042"]}
    assert w.end(signal.SIGINT) == 0


RESTART = r"""
set -u
"$TB" watch >"$TB_RUN_DIR/watch.out" 2>"$TB_RUN_DIR/watch.err" &
watch=$!
trap 'kill $watch 2>/dev/null; [ -n "${card:-}" ] && kill $card 2>/dev/null; [ -n "${new:-}" ] && kill $new 2>/dev/null; wait' EXIT
for i in $(seq 100); do grep -q watching "$TB_RUN_DIR/watch.err" && break; sleep 0.1; done
kill "$TB_PCSCD_PID"; wait "$TB_PCSCD_PID" 2>/dev/null
for i in $(seq 100); do grep -q pcscd-unavailable "$TB_RUN_DIR/watch.out" && break; sleep 0.1; done
sleep 2  # pcscd stays away a while: the watch must not spin meanwhile
cpu_before=$(awk '{print $14+$15}' /proc/$watch/stat)
sleep 2
cpu_after=$(awk '{print $14+$15}' /proc/$watch/stat)
echo "cpu-ticks-while-pcscd-was-away=$((cpu_after - cpu_before))"
pcscd -f -c "$TB_RUN_DIR/reader.conf" >/dev/null 2>&1 &
new=$!
for i in $(seq 100); do grep -q pcscd-back "$TB_RUN_DIR/watch.out" && break; sleep 0.1; done
"$VT" piv --state "$TB_RUN_DIR/card.json" --serial 7700002 2>/dev/null &
card=$!
for i in $(seq 150); do grep -q "added piv-7700002" "$TB_RUN_DIR/watch.out" && break; sleep 0.1; done
kill -TERM $watch; wait $watch; echo "watch-rc=$?"
echo ---
cat "$TB_RUN_DIR/watch.out"
"""


def test_watch_survives_a_pcscd_restart():
    r = subprocess.run([str(ROOT / "Tools" / "with-pcscd"), "--", "bash", "-c", RESTART], capture_output=True,
                       text=True, timeout=120, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "TB": TOKENBRIDGE,
                                                    "VT": VIRTUAL_TOKEN})
    head, _, events = r.stdout.partition("---\n")
    assert "watch-rc=0" in head, r.stdout + r.stderr
    # Said once, however long pcscd stayed away; no busy loop meanwhile (a spinning loop burns ~200 ticks in 2 s).
    assert events.count("pcscd-unavailable") == 1, events
    ticks = int(head.split("cpu-ticks-while-pcscd-was-away=")[1].split()[0])
    assert ticks <= 5, head
    lines = events.splitlines()
    # A pcscd told to stop removes its readers first (pcscdaemon.c: RFCleanupReaders, then its socket goes): a watch
    # that reads that change before the socket closes says so, truthfully; a loaded machine lets it.
    while lines and lines[0].startswith("reader-removed source=\"Virtual PCD 00 0"):
        lines.pop(0)
    assert lines[0] == "pcscd-unavailable (waiting for pcscd to come back)", events
    assert lines[1] == "pcscd-back", events
    assert lines[-1].startswith("added piv-7700002 capabilities=piv"), events


def test_wait_resumes_when_the_card_is_inserted(cards):
    p = subprocess.Popen([TOKENBRIDGE, "pin", "status", "--wait", "--timeout", "60"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True, stdin=subprocess.DEVNULL)
    line = p.stderr.readline()
    assert line == "tokenbridge: insert your token (waiting up to 60 s)…\n"
    assert p.poll() is None  # waiting, not failing
    cards(serial=5000077)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert "piv-5000077" in out and "PIN: 3 tries left" in out, out
    assert err == "tokenbridge: token found.\n"


def test_wait_for_a_named_token_ignores_others(cards):
    cards(serial=5000000)
    p = subprocess.Popen([TOKENBRIDGE, "pin", "status", "--token", "piv-5000101", "--wait", "--timeout", "60"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         stdin=subprocess.DEVNULL)
    assert p.stderr.readline() == "tokenbridge: insert the token piv-5000101 (waiting up to 60 s)…\n"
    cards(slot=1, serial=5000101)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert "piv-5000101" in out and "piv-5000000" not in out, out


def test_wait_resumes_when_the_fido2_key_is_plugged_in(tmp_path):
    sock = str(tmp_path / "fido.sock")
    p = subprocess.Popen([TOKENBRIDGE, "pin", "status", "--wait", "--timeout", "60"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True, stdin=subprocess.DEVNULL,
                         env=dict(os.environ, TOKENBRIDGE_VIRTUAL_FIDO=sock))
    assert p.stderr.readline().startswith("tokenbridge: insert your token")
    key = Key(tmp_path)
    try:
        out, err = p.communicate(timeout=60)
    finally:
        key.stop()
    assert p.returncode == 0, err
    assert "fido2-fido-sock" in out and "PIN: not set" in out, out


def test_wait_times_out_with_exit_14_and_without_wait_fails_at_once():
    r = tb("pin", "status", "--wait", "--timeout", "1")
    assert r.returncode == 14, r.stderr
    assert r.stderr.startswith("tokenbridge: insert your token (waiting up to 1 s)…\n"), r.stderr
    # Scripts that did not ask to wait keep failing at once, with the code they always got.
    r = tb("pin", "status")
    assert r.returncode == 4, r.stderr
    assert "insert" not in r.stderr


def test_tokens_wait_lists_the_card_once_it_is_inserted(cards):
    """`tokens --wait` waits for a token like the other token commands (it used to ignore --wait and print "No token
    found.")."""
    p = subprocess.Popen([TOKENBRIDGE, "tokens", "--json", "--wait", "--timeout", "60"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True, stdin=subprocess.DEVNULL)
    assert p.stderr.readline() == "tokenbridge: insert your token (waiting up to 60 s)…\n"
    assert p.poll() is None  # waiting, not failing
    cards(serial=5000078)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert [t["id"] for t in json.loads(out)] == ["piv-5000078"], out


def test_tokens_wait_for_a_named_token_and_timeout(cards):
    cards(serial=5000000)
    r = tb("tokens", "--token", "piv-5000102", "--wait", "--timeout", "1")
    assert r.returncode == 14, r.stderr
    assert r.stderr.startswith("tokenbridge: insert the token piv-5000102 (waiting up to 1 s)…\n"), r.stderr
    r = tb("tokens", "--wait", "--timeout", "1")  # a token is there: listed at once
    assert r.returncode == 0 and "piv-5000000" in r.stdout and "insert" not in r.stderr, r.stderr
