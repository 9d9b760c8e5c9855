"""Shared by the guest-side scripts of the lab tests (run inside the guest, not collected by pytest)."""
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("TB_BIN") or ROOT / ".build" / "debug")


def run_tokenbridge(env, *args, pins=None):
    """tokenbridge with `env`; `pins` (lines) through --pin-fd on a pipe, never argv; no terminal."""
    cmd, fds = [str(BIN / "tokenbridge"), *args], ()
    if pins is not None:
        r, w = os.pipe()
        os.write(w, "".join(p + "\n" for p in pins).encode())
        os.close(w)
        cmd += ["--pin-fd", str(r)]
        fds = (r,)
    try:
        return subprocess.run(cmd, capture_output=True, text=True, env=env, pass_fds=fds, timeout=120,
                              stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        for fd in fds:
            os.close(fd)
