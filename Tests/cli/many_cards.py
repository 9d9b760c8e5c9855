"""Parallel PIN changes on eight virtual PIV cards, for Tests/cli/test_many_cards.py.

Runs inside `Tools/with-pcscd --readers 8` (eight vpcd readers, one card each; see scale_fixture.py):

    Tools/with-pcscd --readers 8 -- python3 Tests/cli/many_cards.py ROUNDS [--sequential]

Each round starts one `tokenbridge pin change --token piv-N` per card, all at once (the PINs through --pin-fd),
and waits for all of them; every card's PIN goes back and forth between two values. A run still going after
`HANG` seconds is a hang (it is killed); a run that ends by a signal is a crash. `--sequential` runs the same
commands one after the other (the crash without the contention). Prints one JSON line: the number of runs, and
those that failed, hung or crashed."""
import json
import os
import subprocess
import sys
import tempfile
import time

from scale_fixture import TOKENBRIDGE, Tokens

CARDS = 8
PINS = ("123456", "24681357")
HANG = 60  # seconds; a PIN change takes well under one, even eight at once on two loaded CPUs


def start(env, card, old, new):
    r_fd, w_fd = os.pipe()
    os.write(w_fd, f"{old}\n{new}\n".encode())
    os.close(w_fd)
    p = subprocess.Popen([TOKENBRIDGE, "pin", "change", "--token", f"piv-{6_100_000 + card}", "--pin-fd",
                          str(r_fd)], env=env, pass_fds=(r_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    os.close(r_fd)
    return p


def finish(p, deadline):
    try:
        out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return "hung", out, err


def main(rounds, sequential):
    outcome = {"runs": 0, "failed": [], "hung": 0, "crashed": 0}
    with tempfile.TemporaryDirectory() as work:
        tokens = Tokens(work)
        try:
            for i in range(CARDS):
                tokens.add_card(i)
            tokens.wait(CARDS, 0)
            env = dict(tokens.env(), XDG_DATA_HOME=f"{work}/data", XDG_CONFIG_HOME=f"{work}/config")
            for n in range(rounds):
                old, new = PINS[n % 2], PINS[(n + 1) % 2]
                results = []
                if sequential:
                    for c in range(CARDS):
                        results.append(finish(start(env, c, old, new), time.monotonic() + HANG))
                else:
                    procs = [start(env, c, old, new) for c in range(CARDS)]
                    deadline = time.monotonic() + HANG
                    results = [finish(p, deadline) for p in procs]
                for rc, out, err in results:
                    outcome["runs"] += 1
                    if rc == "hung":
                        outcome["hung"] += 1
                    elif rc < 0:
                        outcome["crashed"] += 1
                    if rc != 0 or out != "PIN changed.\n":
                        outcome["failed"].append({"round": n, "rc": rc, "stdout": out[-200:], "stderr": err[-300:]})
                if any(rc == "hung" for rc, _, _ in results):
                    break  # the cards are stuck with the PIN of no known round: nothing more to learn
        finally:
            tokens.stop()
    print(json.dumps(outcome))


if __name__ == "__main__":
    main(int(sys.argv[1]), "--sequential" in sys.argv[2:])
