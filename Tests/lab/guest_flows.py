"""Runs inside the lab guest (not collected by pytest): drives tokenbridge through a whole UAF flow with the
device attached over USB/IP, against the reference RP on the guest's loopback, and prints one JSON object with
each step's exit status and stderr, and what the RP holds. The host-side tests assert on it.
Usage: guest_flows.py fido|piv [resident]
With "resident" the token under test stays in the guest (a real token passed through, or the stand-in): every
command names it with --token (a composite token is two tokens), and a FIDO2 key must have no PIN yet (the factory
state the confirmation promised) — its PIN is never guessed."""
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from guest_common import ROOT, run_tokenbridge

RP = ROOT / "Tools" / "rp" / "tokenbridge_rp.py"


def tb(home, *args, pins=None):
    env = dict(os.environ, **home)
    env.pop("TOKENBRIDGE_VIRTUAL_FIDO", None)  # the kernel's device, through libfido2's own enumeration
    p = run_tokenbridge(env, *args, pins=pins)
    return {"cmd": " ".join(args), "rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}


def main():
    kind = sys.argv[1]
    resident = sys.argv[2:] == ["resident"]
    work = Path(tempfile.mkdtemp(prefix="flows-", dir="/tmp"))
    home = {"XDG_DATA_HOME": str(work / "data"), "XDG_CONFIG_HOME": str(work / "config")}
    port_file = work / "rp.port"
    rp = subprocess.Popen([sys.executable, str(RP), "--port", "0", "--port-file", str(port_file)],
                          stderr=open(work / "rp.log", "w"))
    try:
        pin = "123456" if kind == "piv" else "1234"
        steps = [tb(home, "tokens", "--json")]
        sel = []
        if resident:
            want = "piv" if kind == "piv" else "fido2"
            listed = [t for t in json.loads(steps[0]["stdout"]) if want in t.get("kinds", [t["kind"]])]
            if len(listed) != 1:
                sys.exit(f"expected one {kind} token in the guest, tokens --json lists: {steps[0]['stdout']}")
            # A composite token's ids: the card's and the key's; the flow names the part it tests.
            sel = ["--token", [i for i in listed[0].get("ids", [listed[0]["id"]]) if i.startswith(want + "-")][0]]
            if kind == "fido" and listed[0]["fido2"]["options"].get("clientPin"):
                sys.exit("the FIDO2 key has a PIN: the destructive flows need one without (reset it first); "
                         "no PIN was tried")
        if kind == "fido":
            steps.append(tb(home, "pin", "set", *sel, pins=[pin]))
        steps.append(tb(home, "pin", "status", "--json", *sel))
        # The RP is needed from here on: its start (seconds of Python imports under TCG) ran beside the steps above.
        for _ in range(600):
            if port_file.exists() and port_file.read_text():
                break
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port_file.read_text()}"
        steps.append(tb(home, "register", "--username", "alice", "--server", url, *sel, pins=[pin]))
        steps.append(tb(home, "authenticate", "--username", "alice", "--server", url, *sel, pins=[pin]))
        with urllib.request.urlopen(url + "/_admin/registrations", timeout=10) as r:
            regs = json.loads(r.read())
        steps.append(tb(home, "deregister", "--username", "alice", "--server", url))
        with urllib.request.urlopen(url + "/_admin/registrations", timeout=10) as r:
            after = json.loads(r.read())
        print(json.dumps({"steps": steps, "registrations": regs, "after": after}))
    finally:
        rp.terminate()
        rp.wait(timeout=10)


if __name__ == "__main__":
    main()
