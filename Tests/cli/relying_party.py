"""The reference relying party (Tools/rp/tokenbridge_rp.py) as a test fixture: one process per test on a port of its
own, its UAF endpoints and its admin endpoints (registrations, faults)."""
import json
import subprocess
import sys
import urllib.request

from conftest import ROOT, wait_until

RP = str(ROOT / "Tools" / "rp" / "tokenbridge_rp.py")


class RelyingParty:
    count = 0

    def __init__(self, tmp_path, args=()):
        RelyingParty.count += 1  # each RP of a test gets its own port file and log
        self.port_file = tmp_path / f"rp{RelyingParty.count}.port"
        self.log = open(tmp_path / f"rp{RelyingParty.count}.log", "w")
        self.proc = subprocess.Popen([sys.executable, RP, "--port", "0", "--port-file", str(self.port_file),
                                      "--verbose", *args], stderr=self.log)
        wait_until(lambda: self.port_file.exists(), "reference RP")
        self.url = f"http://127.0.0.1:{self.port_file.read_text()}"

    def post(self, path, body, uaf=True):
        ctype = "application/fido+uaf;charset=UTF-8" if uaf else "application/json"
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": ctype, "Accept": "application/fido+uaf"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def request(self, op, **context):
        name = {"Reg": "registration", "Auth": "authentication", "Dereg": "deregistration"}[op]
        return self.post(f"/nevisfido/uaf/1.1/request/{name}", {"op": op, "context": json.dumps(context)})

    def respond(self, op, message):
        name = {"Reg": "registration", "Auth": "authentication"}[op]
        return self.post(f"/nevisfido/uaf/1.1/{name}", {"uafResponse": message})["statusCode"]

    def registrations(self):
        with urllib.request.urlopen(self.url + "/_admin/registrations", timeout=10) as r:
            return json.loads(r.read())

    def fault(self, **f):
        self.post("/_admin/fault", f, uaf=False)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.log.close()
