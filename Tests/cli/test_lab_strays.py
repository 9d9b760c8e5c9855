"""Lab guests die with whatever started them, and strays can be listed and stopped (Tools/lab, Tools/lib/lab-keeper),
without booting a guest: a fake `qemu-system-x86_64` first on PATH says "ready" the way the guest's job runner does
and then sleeps, and LAB_CACHE holds a fake kernel and initramfs that `prepare` takes as built. LAB_RUNS keeps the
run directories (and so what `strays` looks at) apart from real lab runs.

Before: QEMU ran with -daemonize, so a test session killed by a timeout, Ctrl-C or SIGKILL left its guest running
until someone found it, and Tools/lab had no way to list or stop such guests."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, wait_until

LAB = str(ROOT / "Tools" / "lab")

FAKE_QEMU = f"""#!{sys.executable}
import os, sys, time
args = sys.argv[1:]
append = args[args.index("-append") + 1]
run_dir = [w.split("=", 1)[1] for w in append.split() if w.startswith("lab.dir=")][0]
open(os.path.join(run_dir, "out", "ready"), "w").close()
time.sleep(100000)
"""


@pytest.fixture
def lab(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "qemu-system-x86_64").write_text(FAKE_QEMU)
    (fake / "qemu-system-x86_64").chmod(0o755)
    cache = tmp_path / "cache"
    (cache / "root" / "lib" / "modules" / "6.1.0-fake").mkdir(parents=True)
    (cache / "root" / "boot").mkdir()
    (cache / "root" / "boot" / "vmlinuz-6.1.0-fake").write_text("")
    then = time.time() - 100
    for i, f in enumerate([cache / "linux-image-6.1.0-fake.deb", cache / "root" / ".done", cache / "initramfs.gz"]):
        f.write_text("")
        os.utime(f, (then + i, then + i))  # each newer than the one before: nothing for `prepare` to redo
    os.utime(cache / "initramfs.gz")  # and newer than Tools/lib/lab-init
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", LAB_CACHE=str(cache), LAB_RUNS=str(tmp_path / "runs"),
               LAB_ACCEL="tcg")
    env.pop("LAB_OWNER", None)
    r = subprocess.run([LAB, "check"], env=env, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        pytest.skip(f"the lab's tools are not installed here: {r.stdout.strip()}")
    env["RUNS"] = str(tmp_path / "runs")
    started = []
    yield env, started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait()
    subprocess.run([LAB, "stop", "--strays"], env=env, capture_output=True, timeout=60)


def alive(pid):
    """Running and not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def owner_with_guest(env, name, started):
    """A process that starts guest `name` with Tools/lab start (so it owns it) and then sleeps; and the guest's pid."""
    code = (f"import subprocess, sys, time\nr = subprocess.run([{LAB!r}, 'start', '--name', {name!r}], stdout=subprocess.DEVNULL)\n"
            "print('started' if r.returncode == 0 else 'failed', flush=True)\ntime.sleep(100000)\n")
    p = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    started.append(p)
    assert p.stdout.readline() == "started\n"
    return p, int((Path(env["RUNS"]) / name / "qemu.pid").read_text())


def strays(env):
    r = subprocess.run([LAB, "strays"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [line.split() for line in r.stdout.splitlines()]


def test_a_guest_dies_with_its_owner_killed_by_sigkill(lab):
    env, started = lab
    owner, guest = owner_with_guest(env, "t1", started)
    assert alive(guest) and strays(env) == []
    owner.kill()  # SIGKILL: no cleanup of its own runs
    owner.wait()
    wait_until(lambda: not alive(guest), "the guest to end with its owner", timeout=30)
    assert strays(env) == []


def test_stop_strays_stops_the_guests_no_owner_keeps_and_only_those(lab):
    env, started = lab
    _, kept = owner_with_guest(env, "kept", started)
    # A guest as older lab versions left it: daemonized, no keeper, its owner long gone.
    run_dir = Path(env["RUNS"]) / "old"
    (run_dir / "out").mkdir(parents=True)
    old = subprocess.Popen(["qemu-system-x86_64", "-append", f"console=ttyS0 lab.dir={run_dir} lab.mode=runner"],
                           env=env, start_new_session=True)
    started.append(old)
    wait_until(lambda: (run_dir / "out" / "ready").exists(), "the stray to be up")
    assert strays(env) == [[str(old.pid), "old"]]
    r = subprocess.run([LAB, "stop", "--strays"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and f"stopped stray guest 'old' (pid {old.pid})" in r.stdout, r.stdout + r.stderr
    assert old.wait(timeout=10) == -signal.SIGTERM
    assert not run_dir.exists()
    assert alive(kept) and strays(env) == []
    subprocess.run([LAB, "stop", "--name", "kept"], env=env, timeout=60)
    assert not alive(kept)
