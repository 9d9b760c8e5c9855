"""Runs inside the lab guest (not collected by pytest): `tokenbridge fido2 reset` with a USB/IP detach and
re-attach as the replug. Two virtual keys are served (bus ids 1-1 and 1-2). Prints one JSON object; the
host-side test asserts on it.
  1. alice registered with key 1-1; reset started; 1-1 pulled and 1-2 plugged in instead: refused, nothing reset.
  2. reset again; 1-2 pulled, 1-1 plugged back: reset inside the window, alice deregistered and removed.
  3. fido2-token -R (a real client) resets the key right after an attach (the window starts at USB attach)."""
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pexpect

from guest_common import BIN, ROOT, run_tokenbridge

PORT = "3251"
work = Path(tempfile.mkdtemp(prefix="reset-", dir="/tmp"))
env = dict(os.environ, XDG_DATA_HOME=str(work / "d"), XDG_CONFIG_HOME=str(work / "c"))
env.pop("TOKENBRIDGE_VIRTUAL_FIDO", None)


def sh(*cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


def wait(pred, seconds=60):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.2)
    return False


def attach(bus):
    assert sh("usbip", "--tcp-port", PORT, "attach", "-r", "127.0.0.1", "-b", bus).returncode == 0
    assert wait(lambda: any(Path("/dev").glob("hidraw*"))), "no hidraw after attach"
    sh("udevadm", "settle", "-t", "10")


def detach():
    sh("usbip", "detach", "-p", "0")
    assert wait(lambda: not any(Path("/dev").glob("hidraw*"))), "hidraw still there after detach"


def tb(*args, pins=None):
    return run_tokenbridge(env, *args, pins=pins)


def reset_with_replug(plug_in):
    """Runs fido2 reset, types the key id when asked, and at "Remove the key" detaches and attaches `plug_in`."""
    token = json.loads(tb("tokens", "--json").stdout)[0]["id"]
    child = pexpect.spawn(str(BIN / "tokenbridge"), ["fido2", "reset", "--token", token], env=env,
                          encoding="utf-8", timeout=90)
    child.expect(r"type the key id \(([^)]*)\): ")
    child.sendline(child.match.group(1))
    child.expect("Remove the key")
    detach()
    attach(plug_in)
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus, child.before


def registrations(url):
    with urllib.request.urlopen(url + "/_admin/registrations", timeout=10) as r:
        return json.loads(r.read())


def main():
    server = subprocess.Popen([str(BIN / "virtual-token"), "usbip", "--listen", f"127.0.0.1:{PORT}", "--device",
                               "fido", "--device", "fido", "--state-dir", str(work)],
                              stderr=open(work / "server.log", "w"))
    rp = subprocess.Popen([sys.executable, str(ROOT / "Tools" / "rp" / "tokenbridge_rp.py"), "--port", "0",
                           "--port-file", str(work / "rp.port")], stderr=open(work / "rp.log", "w"))
    out = {}
    try:
        assert wait(lambda: sh("usbip", "--tcp-port", PORT, "list", "-r", "127.0.0.1").returncode == 0)
        attach("1-1")
        assert tb("pin", "set", pins=["1234"]).returncode == 0
        # The RP's start (seconds of Python imports under TCG) ran beside the steps above.
        assert wait(lambda: (work / "rp.port").exists() and (work / "rp.port").read_text())
        url = f"http://127.0.0.1:{(work / 'rp.port').read_text()}"
        # A discoverable credential, so fido2-token -L -r (a real client) has something to list.
        (work / "c" / "tokenbridge").mkdir(parents=True)
        (work / "c" / "tokenbridge" / "config.json").write_text('{"fido2ResidentKeys": true}')
        r = tb("register", "--username", "alice", "--server", url, pins=["1234"])
        assert r.returncode == 0, r.stderr
        out["registered"] = registrations(url)
        # fido2-token asks the PIN on its terminal (and flushes what was typed before the prompt): answer it then.
        child = pexpect.spawn("fido2-token", ["-L", "-r", "/dev/hidraw0"], encoding="utf-8", timeout=90)
        child.expect("Enter PIN for /dev/hidraw0: ")
        child.sendline("1234")
        child.expect(pexpect.EOF)
        child.close()
        out["fido2_token_rps"] = [child.exitstatus, child.before]

        out["wrong_key"] = reset_with_replug("1-2")
        out["after_wrong_key"] = registrations(url)
        out["local_after_wrong_key"] = json.loads(tb("authenticators", "--all", "--json").stdout)

        detach()  # 1-1, the key of alice's registration, is the one plugged in when the reset starts
        attach("1-1")
        out["reset"] = reset_with_replug("1-1")
        out["after_reset"] = registrations(url)
        out["local_after_reset"] = json.loads(tb("authenticators", "--all", "--json").stdout)
        out["info_after_reset"] = sh("fido2-token", "-I", "/dev/hidraw0").stdout

        assert tb("pin", "set", pins=["5678"]).returncode == 0
        detach()
        attach("1-1")
        p = sh("fido2-token", "-R", "/dev/hidraw0")
        out["fido2_token_reset"] = [p.returncode, p.stderr]
        out["info_after_fido2_token_reset"] = sh("fido2-token", "-I", "/dev/hidraw0").stdout
    finally:
        print(json.dumps(out))
        sh("usbip", "detach", "-p", "0")
        server.terminate()
        rp.terminate()


if __name__ == "__main__":
    main()
