#!/usr/bin/env python3
"""A pinentry that speaks Assuan on stdin/stdout and replays a scenario, for the error paths the real
pinentry cannot be made to take on demand.

SCRIPTED_PINENTRY_SCENARIO names a JSON file:
  {"answers": [...], "refuse": ["SETREPEAT", ...], "no_greeting": false}
Each GETPIN / CONFIRM takes the next answer (the position is kept in the file "<scenario>.pos", so it
carries over the separate runs of one tokenbridge command):
  "1234..."   the PIN (sent percent-encoded on a D line; with SETREPEAT also "S PIN_REPEATED")
  "@cancel"   ERR 83886179 Operation cancelled <Pinentry>
  "@ok"       OK (CONFIRM)
  "@die"      exit(1) without answering
  "@sigint"   killed by SIGINT without answering (as a terminal pinentry by the user's Ctrl-C)
  "@hang"     never answer (the caller's timeout must end it)
  "@garbage"  a line that is not Assuan
  "@wait:PATH:PIN"  the PIN once the file PATH exists (the test does something while the dialog is up)
Commands named in "refuse" get "ERR 536871187 Unknown IPC command". Every command received is appended
to "<scenario>.log" (the fake never receives a PIN: it only sends them).

"mode" (optional) replaces the answers:
  "always-empty"  every GETPIN is answered OK without a D line (an empty PIN), after "delay" seconds (default 0),
                  for ever: a pinentry whose user keeps pressing Enter, or that is broken
  "never-reads"   greets, then stops reading its stdin with the pipe full (its own write end of /proc/self/fd/0
                  fills it): the caller's next write finds no room
Each run writes its pid to "<scenario>.pids" (one a line), so a test can check it was ended.
"""
import fcntl
import json
import os
import signal
import sys
import time


def escape(s):
    out = []
    for b in s.encode():
        if b in (0x25, 0x0A, 0x0D) or b < 0x20:
            out.append("%%%02X" % b)
        else:
            out.append(chr(b))
    return "".join(out)


def main():
    path = os.environ["SCRIPTED_PINENTRY_SCENARIO"]
    with open(path) as f:
        scenario = json.load(f)
    answers = scenario.get("answers", [])
    refuse = set(scenario.get("refuse", []))
    log = open(path + ".log", "a")
    pos_file = path + ".pos"
    mode = scenario.get("mode")
    with open(path + ".pids", "a") as f:
        f.write("%d\n" % os.getpid())

    def next_answer():
        pos = int(open(pos_file).read()) if os.path.exists(pos_file) else 0
        with open(pos_file, "w") as f:
            f.write(str(pos + 1))
        return answers[pos] if pos < len(answers) else "@cancel"

    def send(line):
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    repeat = False
    if mode == "never-reads":
        # A second write end of our own stdin pipe, non-blocking: fill the pipe to the brim, then greet and never
        # read. (F_SETPIPE_SZ 4096: the smallest pipe, filled in one go.)
        w = os.open("/proc/self/fd/0", os.O_WRONLY | os.O_NONBLOCK)
        try:
            fcntl.fcntl(w, 1031, 4096)  # F_SETPIPE_SZ
        except OSError:
            pass
        try:
            while True:
                os.write(w, b"#" * 4096)
        except BlockingIOError:
            pass
        send("OK Pleased to meet you (scripted, not reading)")
        while True:
            time.sleep(3600)
    send("OK Pleased to meet you (scripted)")
    for raw in sys.stdin:
        line = raw.rstrip("\n")
        log.write(line + "\n")
        log.flush()
        verb = line.split(" ", 1)[0]
        if verb in refuse:
            send("ERR 536871187 Unknown IPC command <User defined source 1>")
            continue
        if verb == "SETREPEAT":
            repeat = True
        if verb == "BYE":
            send("OK closing connection")
            return
        if verb == "GETPIN" and mode == "always-empty":
            log.write("answer @empty\n")
            log.flush()
            time.sleep(scenario.get("delay", 0))
            send("OK")
            continue
        if verb in ("GETPIN", "CONFIRM"):
            a = next_answer()
            log.write("answer " + ("@pin" if not a.startswith("@") else a.split(":", 1)[0]) + "\n")
            log.flush()
            if a.startswith("@wait:"):
                _, gate, a = a.split(":", 2)
                while not os.path.exists(gate):
                    time.sleep(0.05)
            if a == "@cancel":
                send("ERR 83886179 Operation cancelled <Pinentry>")
            elif a == "@ok":
                send("OK")
            elif a == "@die":
                os._exit(1)
            elif a == "@sigint":
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(10)
            elif a == "@hang":
                while True:
                    time.sleep(3600)
            elif a == "@garbage":
                send("HELLO THERE")
            else:
                # Split the PIN over two D lines, as Assuan allows, to check they are joined.
                send("D " + escape(a[:2]))
                send("D " + escape(a[2:]))
                if repeat and verb == "GETPIN":
                    send("S PIN_REPEATED")
                send("OK")
            continue
        send("OK")


if __name__ == "__main__":
    main()
