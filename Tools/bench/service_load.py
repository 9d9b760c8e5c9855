"""Runs inside Tools/with-pcscd with a virtual card (see Tools/bench/service_load). `load()` is also what the suite's
bound test (Tests/cli/test_dbus_service_load.py) runs, with few callers, asserting errors and contexts only."""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from jeepney import DBusAddress, HeaderFields, MatchRule, MessageType, message_bus, new_method_call
from jeepney.io.blocking import open_dbus_connection

NAME = "org.tokenbridge.TokenBridge1"
SERVICE = DBusAddress("/org/tokenbridge/TokenBridge1", bus_name=NAME, interface=NAME)
METHODS = ("Discover", "ListTokens", "CheckPolicy", "NotifyUAFResult", "ProcessUAFOperation")
BUSY = NAME + ".Error.Busy"


def pcsc_contexts(pid):
    """The PC/SC contexts process `pid` holds: its Unix sockets whose other end is pcscd's (pcsc-lite opens one
    connection to pcscd per context; the bus connection and libcurl's internal socket pairs are not counted)."""
    out = subprocess.run(["ss", "-xpn"], capture_output=True, text=True).stdout
    owner, peer = {}, {}
    for line in out.splitlines()[1:]:
        f = line.split()
        if len(f) < 8:
            continue
        # Netid State Recv-Q Send-Q Local-Address Local-Inode Peer-Address Peer-Inode [users:(("name",pid=N,fd=M))]
        local, remote = f[5], f[7]
        peer[local] = remote
        users = line.split("users:", 1)[1] if "users:" in line else ""
        owner[local] = users
    mine = [i for i, u in owner.items() if f"pid={pid}," in u]
    return sum(1 for i in mine if '"pcscd"' in owner.get(peer.get(i, ""), ""))


def status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith(key + ":")).split()[1])


class Sampler(threading.Thread):
    """Samples the service's PC/SC contexts, threads and RSS every 20 ms while the load runs."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.stop = pid, threading.Event()
        self.contexts = self.threads = self.rss = 0

    def run(self):
        while not self.stop.is_set():
            try:
                self.contexts = max(self.contexts, pcsc_contexts(self.pid))
                self.threads = max(self.threads, status(self.pid, "Threads"))
                self.rss = max(self.rss, status(self.pid, "VmRSS"))
            except (OSError, StopIteration):
                pass
            time.sleep(0.02)


def load(address, pid, callers, calls, messages):
    """`callers` connections at once, each making `calls` calls of every method; `messages()` gives a (CheckPolicy
    message, ProcessUAFOperation message) pair, asked for each caller before any starts (the RP serves one request
    at a time). Returns per method the latencies (s) of answered calls, the Busy count and the other errors; and
    the sampler's maxima."""
    results = {m: {"latency": [], "busy": 0, "errors": []} for m in METHODS}
    lock = threading.Lock()
    start = threading.Barrier(callers)

    pairs = [messages() for _ in range(callers)]

    def caller(check, operation):
        conn = open_dbus_connection(bus=address)
        conn.send_and_get_reply(message_bus.AddMatch(MatchRule(type="signal", interface=NAME + ".Request")))
        start.wait(timeout=120)
        for _ in range(calls):
            for method in METHODS:
                args = {"Discover": ("", ()), "ListTokens": ("a{sv}", ({},)),
                        "CheckPolicy": ("sa{sv}", (check, {})), "NotifyUAFResult": ("us", (1200, "{}")),
                        "ProcessUAFOperation": ("sssa{sv}", ("", operation, "", {}))}[method]
                t0 = time.monotonic()
                r = conn.send_and_get_reply(new_method_call(SERVICE, method, *args), timeout=120)
                if r.header.message_type == MessageType.method_return and method == "ProcessUAFOperation":
                    with conn.filter(MatchRule(type="signal", member="Response", path=r.body[0])) as q:
                        signal = conn.recv_until_filtered(q, timeout=120)
                    ok = signal.body[0] in (0, 2)  # a server's refusal is the RP's answer, not the service's error
                else:
                    ok = r.header.message_type == MessageType.method_return
                elapsed = time.monotonic() - t0
                with lock:
                    entry = results[method]
                    if ok:
                        entry["latency"].append(elapsed)
                    elif r.header.fields.get(HeaderFields.error_name) == BUSY:
                        entry["busy"] += 1
                    else:
                        entry["errors"].append(r.header.fields.get(HeaderFields.error_name) or str(signal.body))
        conn.close()

    sampler = Sampler(pid)
    sampler.start()
    threads = [threading.Thread(target=caller, args=pair) for pair in pairs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sampler.stop.set()
    sampler.join()
    return results, sampler


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def main():
    callers = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    tb = os.path.join(os.environ["TB_BIN"], "tokenbridge")
    work = tempfile.mkdtemp()
    facet = "unix:exe:" + os.readlink("/proc/self/exe")
    pinentry = os.path.join(work, "pinentry.py")
    with open(pinentry, "w") as f:
        f.write(f"#!{sys.executable}\nimport sys\nprint('OK ready', flush=True)\nfor line in sys.stdin:\n"
                "    if line.startswith('GETPIN'): print('D 123456', flush=True)\n"
                "    if line.startswith('BYE'): print('OK', flush=True); break\n    print('OK', flush=True)\n")
    os.chmod(pinentry, 0o755)
    env = dict(os.environ, XDG_DATA_HOME=os.path.join(work, "data"), XDG_CONFIG_HOME=os.path.join(work, "config"),
               PINENTRY_PROGRAM=pinentry)
    port_file = os.path.join(work, "rp.port")
    rp = subprocess.Popen([sys.executable, os.path.join(root, "Tools/rp/tokenbridge_rp.py"), "--port", "0",
                           "--port-file", port_file, "--facet", facet], stderr=subprocess.DEVNULL)
    daemon = service = None
    try:
        while not os.path.exists(port_file) or not open(port_file).read():
            time.sleep(0.05)
        url = "http://127.0.0.1:" + open(port_file).read()

        def post(path, body):
            req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST", headers={
                "Content-Type": "application/fido+uaf;charset=UTF-8", "Accept": "application/fido+uaf"})
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.loads(r.read())

        def request(op):
            return post(f"/nevisfido/uaf/1.1/request/{op}", {
                "op": op[:3].capitalize() if op != "authentication" else "Auth",
                "context": json.dumps({"username": "bench"})})["uafRequest"]

        r, w = os.pipe()
        os.write(w, b"123456\n")
        os.close(w)
        p = subprocess.run([tb, "uaf", "process", "--facet-id", facet, "--pin-fd", str(r)],
                           input=request("registration"), capture_output=True, text=True, env=env, pass_fds=(r,),
                           timeout=60)
        os.close(r)
        assert p.returncode == 0, p.stderr
        post("/nevisfido/uaf/1.1/registration", {"uafResponse": json.loads(p.stdout)["uafProtocolMessage"]})
        # The peer: the CLI's own listing, one process per call, measured here.
        peer = []
        for _ in range(5):
            t0 = time.monotonic()
            subprocess.run([tb, "uaf", "discover", "--json"], capture_output=True, env=env, check=True, timeout=60)
            peer.append(time.monotonic() - t0)
        daemon = subprocess.Popen(["dbus-daemon", "--session", "--print-address", "--nofork"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        address = daemon.stdout.readline().strip()
        service = subprocess.Popen([tb, "serve", "--address", address, "--idle-timeout", "0"], env=env,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        conn = open_dbus_connection(bus=address)
        while not conn.send_and_get_reply(message_bus.NameHasOwner(NAME)).body[0]:
            time.sleep(0.05)
        results, sampler = load(address, service.pid, callers, calls,
                                lambda: (request("registration"), request("authentication")))
        ms = lambda s: s * 1000  # noqa: E731
        print(f"tokenbridge serve, {callers} callers x {calls} calls of each method at once ({tb}):")
        print(f"{'method':22}{'answered':>9}{'busy':>6}{'errors':>7}{'p50':>9}{'p90':>9}{'p99':>9}{'max':>9}")
        for m in METHODS:
            e = results[m]
            lat = e["latency"]
            print(f"{m:22}{len(lat):9}{e['busy']:6}{len(e['errors']):7}" + "".join(
                f"{ms(percentile(lat, p)):7.1f}ms" for p in (50, 90, 99, 100)))
        d50 = percentile(results["Discover"]["latency"], 50)
        print(f"peer `uaf discover --json` p50 {ms(statistics.median(peer)):.1f}ms; Discover p50 under load / peer: "
              f"{d50 / statistics.median(peer):.2f}")
        print(f"PC/SC contexts held at most: {sampler.contexts}; threads at most: {sampler.threads}; "
              f"RSS at most: {sampler.rss / 1024:.1f} MiB")
        errors = sum(len(results[m]["errors"]) for m in METHODS)
        for m in METHODS:
            for e in results[m]["errors"][:3]:
                print(f"  {m}: {e}")
        sys.exit(1 if errors else 0)
    finally:
        for proc in (service, daemon, rp):
            if proc and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=10)


if __name__ == "__main__":
    main()
