"""Runs inside Tools/with-pcscd --readers 8 --rp. See Tools/bench/provision."""
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "Tests", "cli"))
from scale_fixture import TOKENBRIDGE, Tokens  # noqa: E402

ROWS = "--rows" in sys.argv
args = [a for a in sys.argv[1:] if a != "--rows"]
ROUNDS = int(args[0]) if args else 6
WARM_UP = 1  # rounds not counted (the first runs after start were the slowest)
LATENCY = "yubikey5"
SERVER = os.environ["TB_SERVER"]
CARDS, KEYS = 8, 8
LIMIT = 1.5  # the bound: 16 tokens at most 1.5x the time of one
# After the tokens appear (a `tokens --json` every 0.2 s until pcscd lists them all), quiet before the timed run.
SETTLE = 1.0
TICK = os.sysconf("SC_CLK_TCK")
# The timed runs: 1 card, 1 key, the 16 tokens; and, to tell which kind does not overlap its waits, 8 cards alone and
# 8 keys alone.
RUNS = {"card": (1, 0), "key": (0, 1), "many": (CARDS, KEYS), "cards": (CARDS, 0), "keys": (0, KEYS)}


def cpu_of(pid):
    """CPU seconds (user + system) of process `pid` so far, from /proc (clock ticks)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except OSError:
        return 0.0


def plan(tag, cards, keys):
    rows = [f"{tag}-card{i},,piv," for i in range(cards)] + [f"{tag}-key{i},,fido2," for i in range(keys)]
    return "username,serial,kind,payload\n" + "\n".join(rows) + "\n"


def provision_once(work, recipient, label, tag):
    """One `tokenbridge provision` of fresh tokens (factory state, started for this run alone): its wall time, the
    arrival time of each --json event, the report's rows and the CPU each party spent."""
    cards, keys = RUNS[label]
    d = Path(work, f"{tag}-{label}")
    d.mkdir()
    tokens = Tokens(d)
    try:
        for i in range(cards):
            tokens.add_card(i, latency=LATENCY)
        for i in range(keys):
            tokens.add_key(i, latency=LATENCY)
        tokens.wait(cards, keys)
        time.sleep(SETTLE)
        (d / "plan.csv").write_text(plan(tag, cards, keys))
        home = {"XDG_DATA_HOME": str(d / "data"), "XDG_CONFIG_HOME": str(d / "config")}
        cmd = [TOKENBRIDGE, "provision", "--json", "--plan", str(d / "plan.csv"), "--journal",
               str(d / "journal.sqlite"), "--report", str(d / "report.json"), "--server", SERVER,
               "--pin-recipient", recipient]
        others = {"pcscd": int(os.environ["TB_PCSCD_PID"]), "rp": int(os.environ["TB_RP_PID"])}
        others_before = {k: cpu_of(p) for k, p in others.items()}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        events = []
        with open(d / "stderr", "w") as err:
            t0 = time.perf_counter()
            p = subprocess.Popen(cmd, env=tokens.env(home), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=err, text=True)
            for line in p.stdout:
                events.append((time.perf_counter() - t0, json.loads(line)))
            p.wait()
            wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = {"tokenbridge": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
               "simulators": sum(cpu_of(q.pid) for q in tokens.procs),
               **{k: cpu_of(p) - others_before[k] for k, p in others.items()}}
        if p.returncode != 0:
            sys.exit(f"bench: provision ({label}) exited {p.returncode}: {(d / 'stderr').read_text()[-2000:]}")
        report = json.loads((d / "report.json").read_text())
        done = [r for r in report["rows"] if r["status"] == "done"]
        if len(done) != cards + keys:
            sys.exit(f"bench: provision ({label}) did {len(done)} of {cards + keys} rows: {report}")
        return {"wall": wall, "events": events, "rows": report["rows"], "cpu": cpu}
    finally:
        tokens.stop()


def stages(run):
    """Where one run's time went (seconds): start to the first token assigned (start-up, plan, journal, token
    listing), each row's PIN stage (assigned to pin-set: fresh PIN sealed, set on the token) and registration
    (pin-set to registered: UAF registration with the RP), and the last registration to the exit (report)."""
    at = {}
    for t, e in run["events"]:
        if "event" in e and e.get("row") is not None:
            at.setdefault(e["row"], {})[e["event"]] = t
    first = min(r["assigned"] for r in at.values())
    pin = [r["pin-set"] - r["assigned"] for r in at.values()]
    reg = [r["registered"] - r["pin-set"] for r in at.values()]
    last = max(r["registered"] for r in at.values())
    return {"listing": first, "pin": max(pin), "pinMedian": statistics.median(pin), "registration": max(reg),
            "registrationMedian": statistics.median(reg), "tail": run["wall"] - last}


def row_seconds(run, kind):
    return [r["seconds"] for r in run["rows"] if r["kind"] == kind]


with tempfile.TemporaryDirectory() as work:
    subprocess.run(["age-keygen", "-o", f"{work}/identity.txt"], check=True, capture_output=True)
    recipient = subprocess.run(["age-keygen", "-y", f"{work}/identity.txt"], check=True, capture_output=True,
                               text=True).stdout.strip()
    runs = {k: [] for k in RUNS}
    order = list(RUNS)
    # The machine's speed drifts (a shared VM): each round runs all of them, in an order rotated round by round.
    for n in range(WARM_UP + ROUNDS):
        for label in order[n % len(order):] + order[:n % len(order)]:
            run = provision_once(work, recipient, label, f"r{n}")
            if n >= WARM_UP:
                runs[label].append(run)

if os.environ.get("TB_BENCH_SAMPLES"):
    for k, v in runs.items():
        print(k, " ".join(f"{r['wall'] * 1000:.0f}" for r in v), file=sys.stderr)


def med(label, f):
    return statistics.median(f(r) for r in runs[label])


ms = {k: med(k, lambda r: r["wall"]) * 1000 for k in RUNS}
one = max(ms["card"], ms["key"])  # a parallel run is bounded by its slowest token: the slower single run
ratio = ms["many"] / one
st = {k: {s: med(k, lambda r, s=s: stages(r)[s]) * 1000 for s in stages(runs[k][0])} for k in RUNS}
cpu = {k: {p: med(k, lambda r, p=p: r["cpu"][p]) * 1000 for p in runs[k][0]["cpu"]} for k in RUNS}
alone = {"piv": med("card", lambda r: row_seconds(r, "piv")[0]) * 1000,
         "fido2": med("key", lambda r: row_seconds(r, "fido2")[0]) * 1000}
among = {k: med("many", lambda r, k=k: statistics.median(row_seconds(r, k))) * 1000 for k in ("piv", "fido2")}
slowest = {k: med("many", lambda r, k=k: max(row_seconds(r, k))) * 1000 for k in ("piv", "fido2")}
busy = sum(cpu["many"].values()) / (os.cpu_count() * ms["many"])
why = (f"{CARDS} cards alone {ms['cards'] / ms['card']:.2f}x 1 card, {KEYS} keys alone {ms['keys'] / ms['key']:.2f}x "
       f"1 key; start to first assignment {st['many']['listing']:.0f} ms (1 card {st['card']['listing']:.0f}, 1 key "
       f"{st['key']['listing']:.0f}); slowest row's PIN stage {st['many']['pin']:.0f} ms (1 card "
       f"{st['card']['pin']:.0f}, 1 key {st['key']['pin']:.0f}), registration {st['many']['registration']:.0f} ms "
       f"(1 card {st['card']['registration']:.0f}, 1 key {st['key']['registration']:.0f}); row seconds among 16: "
       f"PIV median {among['piv']:.0f} / slowest {slowest['piv']:.0f} ms (alone {alone['piv']:.0f}), FIDO2 "
       f"{among['fido2']:.0f} / {slowest['fido2']:.0f} ms (alone {alone['fido2']:.0f}); CPU per 16-token run: "
       f"tokenbridge {cpu['many']['tokenbridge']:.0f} ms, simulators {cpu['many']['simulators']:.0f}, pcscd "
       f"{cpu['many']['pcscd']:.0f}, RP {cpu['many']['rp']:.0f} ({busy:.0%} of {os.cpu_count()} CPUs)")
if ROWS:
    print(f"provision, {CARDS} cards + {KEYS} keys, --latency {LATENCY} (peer: ours, 1 token)\t{ms['many']:.0f} ms\t"
          f"{one:.0f} ms\t{ratio:.2f}\t-\t<= {LIMIT:.2f}x\t{'yes' if ratio <= LIMIT else 'no'}\t"
          f"{'' if ratio <= LIMIT else why}")
else:
    print(f"tokenbridge provision, every token --latency {LATENCY}: {ROUNDS} rounds (+{WARM_UP} not counted), each a "
          f"1-card, 1-key, 8-card, 8-key and 16-token run on fresh tokens in rotated order (median; wall time of the process)")
    print(f"  1 card: {ms['card']:6.0f} ms   1 key: {ms['key']:6.0f} ms   {CARDS} cards + {KEYS} keys: "
          f"{ms['many']:6.0f} ms")
    print(f"  ratio 16 tokens / slower single token: {ratio:4.2f} (goal <= {LIMIT:.2f}); / 1 card "
          f"{ms['many'] / ms['card']:4.2f}, / 1 key {ms['many'] / ms['key']:4.2f}")
    print(f"  {CARDS} cards alone: {ms['cards']:6.0f} ms ({ms['cards'] / ms['card']:4.2f}x 1 card)   {KEYS} keys alone: "
          f"{ms['keys']:6.0f} ms ({ms['keys'] / ms['key']:4.2f}x 1 key)")
    for k, name in (("card", "1 card"), ("key", "1 key"), ("cards", f"{CARDS} cards"), ("keys", f"{KEYS} keys"),
                    ("many", "16 tokens")):
        s = st[k]
        print(f"  {name:9}: to first assignment {s['listing']:5.0f} ms, PIN stage {s['pinMedian']:5.0f} ms (slowest "
              f"row {s['pin']:5.0f}), registration {s['registrationMedian']:5.0f} ms (slowest {s['registration']:5.0f}),"
              f" after the last {s['tail']:4.0f} ms; CPU: tokenbridge {cpu[k]['tokenbridge']:.0f} ms, simulators "
              f"{cpu[k]['simulators']:.0f}, pcscd {cpu[k]['pcscd']:.0f}, RP {cpu[k]['rp']:.0f}")
    print(f"  row seconds (report): PIV alone {alone['piv']:.0f} ms, among 16 median {among['piv']:.0f} / slowest "
          f"{slowest['piv']:.0f}; FIDO2 alone {alone['fido2']:.0f} ms, among 16 median {among['fido2']:.0f} / slowest "
          f"{slowest['fido2']:.0f}; 16-token run's CPU {busy:.0%} of {os.cpu_count()} CPUs")
