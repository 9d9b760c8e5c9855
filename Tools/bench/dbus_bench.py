"""Runs inside Tools/with-pcscd with a virtual card. See Tools/bench/dbus."""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from jeepney import DBusAddress, MatchRule, message_bus, new_method_call
from jeepney.io.blocking import open_dbus_connection

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 15
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TB = os.path.join(os.environ["TB_BIN"], "tokenbridge")
WORK = tempfile.mkdtemp()
FACET = "unix:exe:" + os.readlink("/proc/self/exe")  # the service derives this; the CLI is given the same
STAMPS = os.path.join(WORK, "stamps")
PINENTRY = os.path.join(WORK, "pinentry.py")
# A pinentry that answers 123456 and writes when it got its first command and when it sent the PIN (time.time(),
# the clock this script reads too). Its own start-up is in both flows alike.
with open(PINENTRY, "w") as f:
    f.write(f"""#!{sys.executable}
import sys, time
out = open({STAMPS!r}, "a")
print("OK ready", flush=True)
first = True
for line in sys.stdin:
    if first:
        out.write("first %f\\n" % time.time()); out.flush(); first = False
    verb = line.split(" ", 1)[0].strip()
    if verb == "GETPIN":
        out.write("pin %f\\n" % time.time()); out.flush()
        print("D 123456", flush=True)
    if verb == "BYE":
        print("OK", flush=True); break
    print("OK", flush=True)
""")
os.chmod(PINENTRY, 0o755)
ENV = dict(os.environ, XDG_DATA_HOME=os.path.join(WORK, "data"), XDG_CONFIG_HOME=os.path.join(WORK, "config"),
           PINENTRY_PROGRAM=PINENTRY)

port_file = os.path.join(WORK, "rp.port")
rp = subprocess.Popen([sys.executable, os.path.join(ROOT, "Tools/rp/tokenbridge_rp.py"), "--port", "0",
                       "--port-file", port_file, "--facet", FACET], stderr=subprocess.DEVNULL)
daemon = service = None
try:
    while not os.path.exists(port_file) or not open(port_file).read():
        time.sleep(0.05)
    URL = "http://127.0.0.1:" + open(port_file).read()

    def post(path, body):
        req = urllib.request.Request(URL + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/fido+uaf;charset=UTF-8", "Accept": "application/fido+uaf"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def auth_request():
        r = post("/nevisfido/uaf/1.1/request/authentication", {"op": "Auth", "context": json.dumps({"username": "bench"})})
        return r["uafRequest"]

    r, w = os.pipe()
    os.write(w, b"123456\n")
    os.close(w)
    reg = post("/nevisfido/uaf/1.1/request/registration", {"op": "Reg", "context": json.dumps({"username": "bench"})})
    p = subprocess.run([TB, "uaf", "process", "--facet-id", FACET, "--pin-fd", str(r)], input=reg["uafRequest"],
                       capture_output=True, text=True, env=ENV, pass_fds=(r,), timeout=60)
    os.close(r)
    assert p.returncode == 0, p.stderr
    assert post("/nevisfido/uaf/1.1/registration", {"uafResponse": json.loads(p.stdout)["uafProtocolMessage"]})[
        "statusCode"] == 1200

    daemon = subprocess.Popen(["dbus-daemon", "--session", "--print-address", "--nofork"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL,
                              text=True)
    address = daemon.stdout.readline().strip()
    service = subprocess.Popen([TB, "serve", "--address", address, "--idle-timeout", "0"], env=ENV,
                               stdin=subprocess.DEVNULL, start_new_session=True)
    conn = open_dbus_connection(bus=address)
    while not conn.send_and_get_reply(message_bus.NameHasOwner("org.tokenbridge.TokenBridge1")).body[0]:
        time.sleep(0.05)
    conn.send_and_get_reply(message_bus.AddMatch(MatchRule(type="signal", interface="org.tokenbridge.TokenBridge1.Request")))
    svc = DBusAddress("/org/tokenbridge/TokenBridge1", bus_name="org.tokenbridge.TokenBridge1",
                      interface="org.tokenbridge.TokenBridge1")

    def stamps():
        d = dict(line.split() for line in open(STAMPS))
        os.unlink(STAMPS)
        return float(d["first"]), float(d["pin"])

    def cli():
        message = auth_request()
        t0 = time.time()
        p = subprocess.run([TB, "uaf", "process", "--facet-id", FACET, "--prompt", "pinentry"], input=message,
                           capture_output=True, text=True, env=ENV, start_new_session=True, timeout=60)
        t1 = time.time()
        assert p.returncode == 0, p.stderr
        first, pin = stamps()
        return first - t0, t1 - pin

    def dbus():
        message = auth_request()
        t0 = time.time()
        path = conn.send_and_get_reply(new_method_call(svc, "ProcessUAFOperation", "sssa{sv}", ("", message, "", {}))).body[0]
        rule = MatchRule(type="signal", member="Response", path=path)
        with conn.filter(rule) as q:
            m = conn.recv_until_filtered(q, timeout=60)
        t1 = time.time()
        assert m.body[0] == 0, m.body
        first, pin = stamps()
        return first - t0, t1 - pin

    c_first, c_after, d_first, d_after = [], [], [], []
    for _ in range(ROUNDS):  # interleaved, so drift hits both alike
        a, b = cli()
        c_first.append(a)
        c_after.append(b)
        a, b = dbus()
        d_first.append(a)
        d_after.append(b)
    ms = lambda xs: statistics.median(xs) * 1000  # noqa: E731
    print(f"tokenbridge serve vs uaf process, PIV authentication, {ROUNDS} rounds, medians ({TB}):")
    print(f"{'':28}{'uaf process':>12}{'serve':>10}{'delta':>10}{'budget':>9}")
    for name, c, d in (("call -> pinentry's 1st cmd", c_first, d_first), ("PIN -> answer", c_after, d_after)):
        delta = ms(d) - ms(c)
        print(f"{name:28}{ms(c):10.1f}ms{ms(d):8.1f}ms{delta:+8.1f}ms{'  ok' if delta <= 100 else '  OVER':>9}")
finally:
    for proc in (service, daemon, rp):
        if proc and proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=10)
