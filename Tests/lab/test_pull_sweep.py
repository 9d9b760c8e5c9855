"""The pull sweep: every flow, with the token pulled out at each of its requests — each CCID APDU (PIV, through pcscd
and libccid) and each CTAPHID report (FIDO2, hidraw) — then plugged back in. After each cut: no PIN try lost beyond the
one in flight, the local registrations, the server's and the token's keys agree, and the same flow run again succeeds.
Tests/lab/guest_pull_sweep.py runs every cut point of every flow inside one guest script (process starts are slow under
TCG); this prints its per-flow summary and asserts on it.

The token runs the request it is pulled at and its answer is lost (`processed`): the cut that can leave the token
ahead of the host. `LAB_PULL_MODE=dropped` sweeps the other one (the request never reaches the token)."""
import json
import os
import time

from conftest import ROOT

FLOWS = ["piv-register", "piv-authenticate", "piv-pin-change", "fido-register", "fido-authenticate", "fido-pin-change"]
MODE = os.environ.get("LAB_PULL_MODE", "processed")
# LAB_PULL_SAMPLE=N: N cut points per flow, chosen by LAB_PULL_SEED (Tools/test samples, with the seed printed, and
# sweeps every point with TB_PULL_FULL=1); unset: every request of every flow.
SAMPLE = os.environ.get("LAB_PULL_SAMPLE")
SEED = os.environ.get("LAB_PULL_SEED", "0")


def sweep(devices, flows):
    started = time.monotonic()
    sample = ["--sample", f"{int(SAMPLE)}:{SEED}"] if SAMPLE else []
    r = devices.run("python3", str(ROOT / "Tests" / "lab" / "guest_pull_sweep.py"), MODE, *sample, *flows, timeout=900)
    seconds = time.monotonic() - started
    lines = r.stdout.splitlines()
    flows = [json.loads(l[5:]) for l in lines if l.startswith("flow ")]
    print(f"\npull sweep ({MODE}): {seconds:.0f} s in the guest")
    for f in flows:
        points = "every request" if len(f["points"]) == f["requests"] else f"k={f['points']} (seed {f['seed']})"
        print(f"  {f['flow']}: {f['requests']} requests, {f['cuts']} cut points in {f['seconds']} s, at {points}; "
              f"exit codes "
              f"{f['exit_codes']}; not reached {f['not_reached']}; inconsistent {len(f['inconsistent'])}; "
              f"rerun failed {len(f['rerun_failed'])}")
        if "phase_seconds" in f:
            print(f"    seconds per phase: {f['phase_seconds']}")
        for outcome, ks in f.get("reruns", {}).items():
            print(f"    run again: {outcome} at k={ks}")
        for message, ks in f["messages"].items():
            print(f"    k={ks}: {message}")
        for bad in f["inconsistent"] + f["rerun_failed"]:
            print(f"    FOUND {json.dumps(bad)}")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    return flows


def test_pull_at_every_request_of_every_flow(devices):
    flows = sweep(devices, FLOWS)
    assert [f["flow"] for f in flows] == FLOWS
    for f in flows:
        # Every cut point was reached (a flow that made fewer requests than when it was counted is a finding too).
        assert f["requests"] > 0 and f["cuts"] == len(f["points"]) and not f["not_reached"], f
        assert f["inconsistent"] == [], f
        assert f["rerun_failed"] == [], f
        # A pull mid-operation says so: exit 10 (removed during the operation), or 22 when the token was gone before
        # an authenticator was chosen ("that token is not plugged in").
        assert set(f["exit_codes"]) <= {"10", "22"}, f


def test_pull_at_every_request_of_fido2_reset(devices):
    """fido2 reset with the key id typed on --pin-fd and the replug it asks for done by the guest script; before each
    run (outside the counted requests) the key gets a PIN and one registration, what the reset must take away."""
    [f] = sweep(devices, ["fido-reset"])
    assert f["requests"] > 0 and f["cuts"] == len(f["points"]) and not f["not_reached"], f
    assert f["inconsistent"] == [], f
    assert f["rerun_failed"] == [], f
    # A pull before the replug ends the reset with exit 10; one during the credential probe is taken for "no
    # credential of ours" and the reset goes on after the replug (exit 0: see the report of the sweep).
    assert set(f["exit_codes"]) <= {"0", "10"}, f


def test_pull_at_every_request_of_plug_in_enrollment(devices):
    """`tokenbridge enroll --device hidrawN` as udev's unit runs it (the configuration's "enroll": server, username,
    onInsert auto; the PIN on --pin-fd), the key already with a PIN (so: the registration); before each cut run the
    memory of the key is forgotten (what `enroll --reset` does), so each one really enrolls. After each cut, besides
    the checks of every flow: a cut enrollment is remembered as "enrolled" only with its registration complete (one
    new registration at the RP, registered locally, its credential on the key); the run again enrolls when nothing
    was remembered and says "was enrolled before" (registering nothing) when it was."""
    [f] = sweep(devices, ["fido-enroll"])
    assert f["requests"] > 0 and f["cuts"] == len(f["points"]) and not f["not_reached"], f
    assert f["inconsistent"] == [], f
    assert f["rerun_failed"] == [], f
    # Every cut request's answer is lost, so no cut run can finish: each ends with exit 10 (the key removed during
    # the operation), remembers nothing, and the run again enrolls.
    assert set(f["exit_codes"]) == {"10"}, f
    assert f["reruns"] == {"enrolled": f["points"]}, f
