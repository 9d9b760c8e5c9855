"""Runs inside the lab guest (not collected by pytest): `tokenbridge provision` of the USB tokens attached over
USB/IP — a composite token (its PIV card through the kernel's USB stack, libccid and pcscd) and a FIDO2 key (its
hidraw node, through libfido2's own enumeration) — against the reference RP on the guest's loopback. Opens each
sealed PIN with `age -d` and signs in with it (the key: after the PIN change its forcePINChange asks for), and prints
one JSON object: the run's exit status and output, the report, what the RP holds and each sign-in's exit status."""
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
NEW_PIN = "73914682"


def main():
    work = Path(tempfile.mkdtemp(prefix="provision-", dir="/tmp"))
    env = dict(os.environ, XDG_DATA_HOME=str(work / "data"), XDG_CONFIG_HOME=str(work / "config"))
    env.pop("TOKENBRIDGE_VIRTUAL_FIDO", None)  # the kernel's devices only
    port_file = work / "rp.port"
    rp = subprocess.Popen([sys.executable, str(RP), "--port", "0", "--port-file", str(port_file)],
                          stderr=open(work / "rp.log", "w"))
    try:
        subprocess.run(["age-keygen", "-o", str(work / "desk.key")], check=True, capture_output=True)
        recipient = subprocess.run(["age-keygen", "-y", str(work / "desk.key")], check=True, capture_output=True,
                                   text=True).stdout.strip()
        (work / "plan.csv").write_text("username,kind\ncarduser,piv\nkeyuser,fido2\n")
        for _ in range(600):
            if port_file.exists() and port_file.read_text():
                break
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port_file.read_text()}"
        tokens = json.loads(run_tokenbridge(env, "tokens", "--json").stdout or "[]")
        run = run_tokenbridge(env, "provision", "--plan", str(work / "plan.csv"), "--journal",
                              str(work / "desk.journal"), "--report", str(work / "report.json"), "--server", url,
                              "--pin-recipient", recipient)
        report = json.loads((work / "report.json").read_text()) if (work / "report.json").exists() else None
        signin = {}
        for row in (report or {}).get("rows", []):
            if row["status"] != "done":
                continue
            pin = subprocess.run(["age", "-d", "-i", str(work / "desk.key")], input=row["sealedPin"],
                                 capture_output=True, text=True).stdout
            # The card: the composite token's PIV id; the key: the token that is only a FIDO2 key.
            kinds = {t["id"]: t.get("kinds", [t["kind"]]) for t in tokens}
            if row["kind"] == "piv":
                token = next(i for t in tokens if "piv" in kinds[t["id"]] for i in t.get("ids", [t["id"]])
                             if i.startswith("piv-"))
            else:
                token = next(t["id"] for t in tokens if kinds[t["id"]] == ["fido2"])
            steps = []
            if row["kind"] == "fido2":
                steps.append(run_tokenbridge(env, "authenticate", "--username", row["username"], "--token", token,
                                             "--server", url, pins=[pin]).returncode)
                steps.append(run_tokenbridge(env, "pin", "change", "--token", token, pins=[pin, NEW_PIN]).returncode)
                pin = NEW_PIN
            steps.append(run_tokenbridge(env, "authenticate", "--username", row["username"], "--token", token,
                                         "--server", url, pins=[pin]).returncode)
            signin[row["username"]] = {"token": token, "rcs": steps}
        with urllib.request.urlopen(url + "/_admin/registrations", timeout=10) as r:
            regs = json.loads(r.read())
        print(json.dumps({"rc": run.returncode, "stderr": run.stderr, "tokens": tokens, "report": report,
                          "registrations": regs, "signIn": signin}))
    finally:
        rp.terminate()
        rp.wait(timeout=10)


if __name__ == "__main__":
    main()
