"""What the guest's pull sweep (guest_pull_sweep.py) works with: the USB/IP server's devices and their attach and
detach, the token's state file, the local data, the reference RP's registrations and enrollment's memory, each read
without starting a process where it can (under TCG each costs most of a second)."""
import base64
import hashlib
import json
import os
import sqlite3
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from guest_common import run_tokenbridge

PORT = "3252"
VHCI = Path("/sys/devices/platform/vhci_hcd.0/status")
work = Path(tempfile.mkdtemp(prefix="pull-", dir="/tmp"))
state_dir = work / "state"
state_dir.mkdir()
LOG = work / "requests.log"
CONTROL = work / "unplug"
env = dict(os.environ, XDG_DATA_HOME=str(work / "d"), XDG_CONFIG_HOME=str(work / "c"))
env.pop("TOKENBRIDGE_VIRTUAL_FIDO", None)
# Device 1-1 is the FIDO2 key (hidraw), 1-2 the PIV card (CCID, through pcscd); each flow attaches only its own.
BUS = {"fido": "1-1", "piv": "1-2"}
STATE = {"fido": state_dir / "1-1.fido.json", "piv": state_dir / "1-2.piv.json"}
LOGS = {"fido": LOG, "piv": Path(f"{LOG}.1-2")}
CONTROLS = {"fido": CONTROL, "piv": Path(f"{CONTROL}.1-2")}
PINS = {"piv": ("123456", "654321"), "fido": ("1234", "4321")}
PIN_REQUESTS = {"piv": ("apdu=00 20", "apdu=00 24", "apdu=00 2C"), "fido": ("clientPIN=04", "clientPIN=05", "clientPIN=09")}


def wait(pred, seconds=30, step=0.05):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return False


def ports_free():
    return all(l.split()[2] == "004" for l in VHCI.read_text().splitlines()[1:] if len(l.split()) > 2)


ATTACHED = set()  # the kinds attached since the last detach_all


def attach(kind):
    """Plugs the device in; the next tokenbridge command waits for it (--wait) instead of this polling."""
    ATTACHED.add(kind)
    for _ in range(50):  # the server may still be ending the previous session of this bus id
        if subprocess.run(["usbip", "--tcp-port", PORT, "attach", "-r", "127.0.0.1", "-b", BUS[kind]],
                          capture_output=True).returncode == 0:
            return
        time.sleep(0.1)
    raise SystemExit(f"cannot attach {kind}")


def detach_all():
    for l in VHCI.read_text().splitlines()[1:]:
        f = l.split()
        if len(f) > 2 and f[2] != "004":
            subprocess.run(["usbip", "detach", "-p", str(int(f[1]))], capture_output=True)
    assert wait(ports_free), "a vhci port stays in use"
    had_reader = "piv" in ATTACHED
    ATTACHED.clear()
    if not had_reader:
        return  # no CCID reader to wait for (each listing is a process: most of a second under TCG)
    # pcscd lets a detached reader go a little later than the kernel: a command started meanwhile (the next flow's
    # first) meets the CCID reader in the middle of its removal and ends with "removed" although it wanted the FIDO2
    # key. Each flow starts once pcscd lists no reader of ours.
    assert wait(lambda: "Virtual Token CCID" not in subprocess.run(["opensc-tool", "-l"], capture_output=True,
                                                                    text=True).stdout, step=0.2), "pcscd keeps the reader"


def tb(*args, pins=None):
    return run_tokenbridge(env, *args, pins=pins)


def token_state(kind):
    s = json.loads(STATE[kind].read_text())
    if kind == "piv":
        pin = bytes(s["pin"]).decode() if isinstance(s["pin"], list) else base64.b64decode(s["pin"]).decode()
        return {"tries": s["pinRetries"], "pin": pin, "keys": sorted(s["keys"])}
    current = next((p for p in PINS["fido"]
                    if base64.b64encode(hashlib.sha256(p.encode()).digest()[:16]).decode() == s.get("pinHash")), None)
    ids = sorted(base64.urlsafe_b64encode(base64.b64decode(c["userID"])).decode().rstrip("=") for c in s["credentials"])
    return {"tries": s["pinRetries"], "pin": current, "users": ids}


MEMORY = work / "d" / "tokenbridge" / "enrollment.json"


def memory():
    """What enrollment remembers (enrollment.json: physical token → enrolled / declined), read as enroll reads it."""
    return json.loads(MEMORY.read_text()) if MEMORY.exists() else {}


def hidraw():
    """The FIDO2 key's hidraw node once the kernel has made it (after an attach); what udev's unit is given (%k)."""
    nodes = []
    assert wait(lambda: nodes.extend(sorted(os.listdir("/sys/class/hidraw"))) or nodes), "no hidraw node"
    return nodes[0]


def registrations(url):
    with urllib.request.urlopen(url + "/_admin/registrations", timeout=10) as r:
        return json.loads(r.read())


def local():
    p = tb("authenticators", "--all", "--json")
    return json.loads(p.stdout) if p.returncode == 0 else {"error": p.stderr.strip()}


def local_rows():
    """The local registrations as the database holds them, read without a process (each costs over a second under
    TCG): stricter than `authenticators`, which would also have repaired what a run left behind."""
    db = work / "d" / "tokenbridge" / "tokenbridge.sqlite"
    if not db.exists():
        return []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
        return [{"keyID": k, "state": st, "token": t, "slot": format(n, "x") if n >= 0 else "-"} for k, st, t, n in
                c.execute("SELECT keyID, state, tokenID, slot FROM authenticator")]
