"""The client side of Tests/lab/test_dbus_service.py, inside the --systemd guest (run by guest_dbus_service.sh with
the scratch directory, the RP's URL, the Flatpak-only RP's URL, the tokenbridge binary and busctl's path): a
jeepney client on root's session bus, busctl and gdbus, against the activated tokenbridge serve. Prints KEY=VALUE
lines (one line each; values JSON where structured)."""
import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.request

from jeepney import DBusAddress, MatchRule, message_bus, new_method_call
from jeepney.io.blocking import open_dbus_connection

W, URL, FLAT_URL, TB, BUSCTL = sys.argv[1:6]
NAME = "org.tokenbridge.TokenBridge1"
PATH = "/org/tokenbridge/TokenBridge1"
SERVICE = DBusAddress(PATH, bus_name=NAME, interface=NAME)
REQ = NAME + ".Request"
SC = os.path.join(W, "scenario.json")
PIV, FIDO2 = "piv-20000001", "fido2-hidraw0"
PINS = {PIV: "123456", FIDO2: "654321"}
MY_FACET = "unix:exe:" + os.readlink("/proc/self/exe")


def out(key, value):
    if not isinstance(value, str):
        value = json.dumps(value)
    print(f"{key}={value}".replace("\n", "\\n"), flush=True)


class CallError(Exception):
    def __init__(self, msg):
        self.name = msg.header.fields.get(4)  # ERROR_NAME
        self.text = msg.body[0] if msg.body else ""
        super().__init__(f"{self.name}: {self.text}")


def call(conn, method, sig="", *args, timeout=60):
    r = conn.send_and_get_reply(new_method_call(SERVICE, method, sig, args), timeout=timeout)
    if r.header.message_type.name == "error":
        raise CallError(r)
    return r.body


def unwrap(v):
    if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str):
        return unwrap(v[1])
    if isinstance(v, dict):
        return {k: unwrap(x) for k, x in v.items()}
    if isinstance(v, list):
        return [unwrap(x) for x in v]
    return v


def connect():
    c = open_dbus_connection(bus="SESSION")
    # The match rule before the call (docs/dbus-api.md), as portal clients do.
    c.send_and_get_reply(message_bus.AddMatch(MatchRule(type="signal", interface=REQ, member="Response")))
    return c


def process(conn, message, options=None):
    return call(conn, "ProcessUAFOperation", "sssa{sv}", "", message, "", options or {})[0]


def response(conn, path, timeout=120):
    with conn.filter(MatchRule(type="signal", interface=REQ, member="Response", path=path)) as q:
        msg = conn.recv_until_filtered(q, timeout=timeout)
    code, results = msg.body
    return code, unwrap(results), msg


def http(url, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/fido+uaf;charset=UTF-8",
                                          "Accept": "application/fido+uaf"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def rp_request(url, op, **context):
    name = {"Reg": "registration", "Auth": "authentication", "Dereg": "deregistration"}[op]
    return http(url, f"/nevisfido/uaf/1.1/request/{name}", {"op": op, "context": json.dumps(context)})["uafRequest"]


def rp_respond(op, message):
    name = {"Reg": "registration", "Auth": "authentication"}[op]
    return http(URL, f"/nevisfido/uaf/1.1/{name}", {"uafResponse": message})["statusCode"]


def registrations():
    return sorted((r["username"], r["aaid"]) for r in http(URL, "/_admin/registrations"))


def scenario(answers):
    with open(SC, "w") as f:
        f.write(json.dumps({"answers": answers}) + "\n")
    for s in (".pos",):
        try:
            os.unlink(SC + s)
        except FileNotFoundError:
            pass


def read(suffix):
    try:
        with open(SC + suffix) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def runs():
    return int(read(".runs").strip() or 0)


def times_since(run):
    """{event: [times]} of the pinentry runs after `run` (guest_enroll_pinentry.sh's .times)."""
    ev = {}
    for line in read(".times").splitlines():
        n, e, t = line.split()
        if int(n) > run:
            ev.setdefault(e, []).append(float(t))
    return ev


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:  # gone: no such file, or (gone between the open and the read) ESRCH
        return False


def wait_until(pred, timeout=60, step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


def local_rows():
    r = subprocess.run([TB, "authenticators", "--json"], capture_output=True, text=True, timeout=120)
    return sorted((x.get("tokenID") or x.get("token"), x.get("username")) for x in json.loads(r.stdout or "[]"))


def ms(a, b):
    return round((b - a) * 1000)


c = connect()
out("my_facet", MY_FACET)
# Another client listening for every Response: the unicast signals of c's requests must never reach it.
watcher = open_dbus_connection(bus="SESSION")
watcher.send_and_get_reply(message_bus.AddMatch(MatchRule(type="signal", interface=REQ)))

# Discover (jeepney): DiscoveryData; ListTokens: the composite token's two sides, usable or not.
d = unwrap(call(c, "Discover")[0])
listed = unwrap(call(c, "ListTokens", "a{sv}", {})[0])
out("py_discover", {"versions": d["supportedUAFVersions"], "vendor": d["clientVendor"],
                    "aaids": sorted(a["aaid"] for a in d["availableAuthenticators"]),
                    "auths": sorted([a["token"], a["kind"], a["aaid"], a["usable"]] for a in listed)})

# CheckPolicy: never a prompt (the pinentry is never started). jeepney, busctl, gdbus.
r0 = runs()
reg = rp_request(URL, "Reg", username="nobody")
out("py_check_reg", call(c, "CheckPolicy", "sa{sv}", reg, {})[0])
out("py_check_reg_fido2", call(c, "CheckPolicy", "sa{sv}", reg, {"token": ("s", FIDO2)})[0])
out("py_check_auth_unregistered", call(c, "CheckPolicy", "sa{sv}", rp_request(URL, "Auth"), {})[0])
out("py_check_untrusted", call(c, "CheckPolicy", "sa{sv}", rp_request(FLAT_URL, "Reg", username="x"), {})[0])
b = subprocess.run(["busctl", "--user", "call", NAME, PATH, NAME, "CheckPolicy", "sa{sv}", reg, "0"],
                   capture_output=True, text=True, timeout=60)
out("busctl_check_reg", (b.stdout + b.stderr).strip())
g = subprocess.run(["gdbus", "call", "--session", "-d", NAME, "-o", PATH, "-m", NAME + ".CheckPolicy", reg, "{}"],
                   capture_output=True, text=True, timeout=60)
# gdbus is not among the RP's trusted facets: its own executable is its facet.
out("gdbus_check_reg", (g.stdout + g.stderr).strip())
out("check_pinentry_runs", runs() - r0)

# Register, authenticate with a transaction, deregister: PIV, then the FIDO2 side (options token).
timing = {}
for token, user in ((PIV, "alice"), (FIDO2, "bob")):
    k = "piv" if token == PIV else "fido2"
    opts = {"token": ("s", token)}
    before = registrations()
    # Registration.
    scenario([PINS[token]])
    r = runs()
    t0 = time.time()
    path = process(c, rp_request(URL, "Reg", username=user), opts)
    code, res, msg = response(c, path)
    t1 = time.time()
    ev = times_since(r)
    timing[f"svc_{k}_reg"] = {"call_to_first": ms(t0, ev["first"][0]), "pin_to_response": ms(ev["pin"][-1], t1)}
    out(f"{k}_reg", {"code": code, "errorCode": res.get("errorCode"), "error": res.get("error"),
                     "unicast": msg.header.fields.get(6) == c.unique_name, "path": path})
    out(f"{k}_reg_status", rp_respond("Reg", json.loads(res["message"])["uafProtocolMessage"]) if code == 0 else -1)
    out(f"{k}_reg_added", sorted(set(registrations()) - set(before)))
    log = read(".log")
    out(f"{k}_reg_desc_app", f"App: {MY_FACET}" in log)
    out(f"{k}_reg_desc_server", f"Server: {URL}" in log)
    # Authentication with a transaction: the text/plain content in the PIN dialog.
    scenario([PINS[token]])
    open(SC + ".log", "w").close()
    r = runs()
    t0 = time.time()
    path = process(c, rp_request(URL, "Auth", username=user, transaction=f"Pay 10 CHF to Bob ({k})"), opts)
    code, res, _ = response(c, path)
    t1 = time.time()
    ev = times_since(r)
    timing[f"svc_{k}_auth"] = {"call_to_first": ms(t0, ev["first"][0]), "pin_to_response": ms(ev["pin"][-1], t1)}
    out(f"{k}_auth", {"code": code, "errorCode": res.get("errorCode"), "error": res.get("error")})
    out(f"{k}_auth_status", rp_respond("Auth", json.loads(res["message"])["uafProtocolMessage"]) if code == 0 else -1)
    out(f"{k}_auth_tx_shown", [l for l in read(".log").splitlines() if "Pay 10 CHF" in l][:1])
    # Deregistration: no dialog; the RP forgets the key when it issues the request, the service locally.
    scenario([])
    r = runs()
    rows_before = local_rows()
    path = process(c, rp_request(URL, "Dereg", username=user), opts)
    code, res, _ = response(c, path)
    out(f"{k}_dereg", {"code": code, "errorCode": res.get("errorCode"), "message": res.get("message"),
                       "pinentry_runs": runs() - r})
    out(f"{k}_dereg_regs", registrations() == before)
    out(f"{k}_dereg_local", {"before": rows_before, "after": local_rows()})

# Two clients at once on one token: A (a process of its own) waits in the PIN dialog; B is refused with Busy;
# ListTokens says the token is busy. Then A is killed (SIGKILL): the service cancels its request (the dialog ends)
# and a next request works.
client = os.path.join(W, "client.py")
with open(client, "w") as f:
    f.write(textwrap.dedent(f"""\
        import sys, time
        from jeepney import DBusAddress, new_method_call
        from jeepney.io.blocking import open_dbus_connection
        c = open_dbus_connection(bus="SESSION")
        a = DBusAddress({PATH!r}, bus_name={NAME!r}, interface={NAME!r})
        r = c.send_and_get_reply(new_method_call(a, "ProcessUAFOperation", "sssa{{sv}}",
                                                 ("", sys.argv[1], "", {{"token": ("s", {PIV!r})}})))
        print(r.body[0], flush=True)
        time.sleep(600)
        """))
scenario(["@hang"])
r = runs()
pids_before = len(read(".pids").split())
a = subprocess.Popen([sys.executable, client, rp_request(URL, "Reg", username="carol")], stdout=subprocess.PIPE,
                     text=True)
a_path = a.stdout.readline().strip()
out("a_request", a_path)
out("a_dialog", wait_until(lambda: "answer @hang" in read(".log"), 60))
a_pin = int(read(".pids").split()[pids_before])
busy = {}
for label, opts in (("same_token", {"token": ("s", PIV)}), ("any_token", {})):
    try:
        busy[label] = "accepted " + process(c, rp_request(URL, "Reg", username="dave"), opts)
    except CallError as e:
        busy[label] = f"{e.name} {e.text}"
out("busy", busy)
# Only the caller that made a request may close it.
r = c.send_and_get_reply(new_method_call(DBusAddress(a_path, bus_name=NAME, interface=REQ), "Close"))
out("close_by_other", r.header.fields.get(4) or r.header.message_type.name)
out("busy_discover", {x["token"]: [x["usable"], x.get("reason")]
                      for x in unwrap(call(c, "ListTokens", "a{sv}", {})[0])})
t = time.time()
a.kill()
a.wait()
out("killed_dialog_gone", wait_until(lambda: not alive(a_pin), 10))
out("killed_dialog_gone_ms", ms(t, time.time()))
scenario([PINS[PIV]])
nxt = None
end = time.monotonic() + 15
while nxt is None and time.monotonic() < end:
    try:
        nxt = process(c, rp_request(URL, "Reg", username="erin"), {"token": ("s", PIV)})
    except CallError as e:
        nxt = None if e.name.endswith(".Busy") else f"{e.name} {e.text}"
        time.sleep(0.1)
code, res, _ = response(c, nxt)
out("after_kill_reg", {"code": code, "errorCode": res.get("errorCode"), "error": res.get("error")})
out("after_kill_status", rp_respond("Reg", json.loads(res["message"])["uafProtocolMessage"]) if code == 0 else -1)

# Close() on a request waiting in the PIN dialog: Response(1), the dialog's program gone.
scenario(["@hang"])
open(SC + ".log", "w").close()
pids_before = len(read(".pids").split())
path = process(c, rp_request(URL, "Reg", username="frank"), {"token": ("s", FIDO2)})
out("close_dialog", wait_until(lambda: "answer @hang" in read(".log"), 60))
pe = int(read(".pids").split()[pids_before])
# While a request waits in the dialog the service must not spin: its CPU time over 2 s (utime + stime, in ticks).
main = subprocess.run(["systemctl", "--user", "show", "-p", "MainPID", "--value", "tokenbridge-serve.service"],
                      capture_output=True, text=True).stdout.strip()


def cpu_ticks():
    with open(f"/proc/{main}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def waiting_cpu_ms():
    t = cpu_ticks()
    time.sleep(2)
    return (cpu_ticks() - t) * 1000 // os.sysconf("SC_CLK_TCK")


# Two windows, the lower counts: a service that spins or polls does so in both, while a burst in one (the guest's
# ticks charged late under a loaded TCG host: 290 ms in one window of a cold run) is not the service's doing.
windows = [waiting_cpu_ms(), waiting_cpu_ms()]
out("waiting_cpu_ms", min(windows))
out("waiting_cpu_windows", " ".join(map(str, windows)))
t = time.time()
r = c.send_and_get_reply(new_method_call(DBusAddress(path, bus_name=NAME, interface=REQ), "Close"))
out("close_reply", r.header.message_type.name)
code, res, _ = response(c, path, timeout=30)
out("close_response", {"code": code, "errorCode": res.get("errorCode"), "ms": ms(t, time.time())})
out("close_dialog_gone", wait_until(lambda: not alive(pe), 10))
r = c.send_and_get_reply(new_method_call(DBusAddress(path, bus_name=NAME, interface=REQ), "Close"))
out("close_again", r.header.fields.get(4) or r.header.message_type.name)
out("close_regs", [u for u, _ in registrations() if u == "frank"])

# A caller pretending to be a Flatpak app: options claiming its app id, FLATPAK_ID in its environment, and a
# /.flatpak-info in its root (which is also the service's root here). flat trusts only flatpak:app-id:org.example.App.
app = "flatpak:app-id:org.example.App"
claims = {"app_id": ("s", "org.example.App"), "facet_id": ("s", app), "facetID": ("s", app),
          "flatpak_app_id": ("s", "org.example.App")}
r0 = runs()
flat_reg = rp_request(FLAT_URL, "Reg", username="mallory")
out("pretend_check_claims", call(c, "CheckPolicy", "sa{sv}", flat_reg, claims)[0])
out("pretend_check_claims_own_rp", call(c, "CheckPolicy", "sa{sv}", rp_request(URL, "Reg", username="m"), claims)[0])
path = process(c, flat_reg, dict(claims, token=("s", PIV)))
code, res, _ = response(c, path)
out("pretend_process", {"code": code, "errorCode": res.get("errorCode"), "error": res.get("error")})
pretender = os.path.join(W, "pretender.py")
with open(pretender, "w") as f:
    f.write(textwrap.dedent(f"""\
        import os, sys
        from jeepney import DBusAddress, new_method_call
        from jeepney.io.blocking import open_dbus_connection
        a = DBusAddress({PATH!r}, bus_name={NAME!r}, interface={NAME!r})
        def check():
            c = open_dbus_connection(bus="SESSION")  # a new connection: identified afresh
            r = c.send_and_get_reply(new_method_call(a, "CheckPolicy", "sa{{sv}}", (sys.argv[1], {{}})))
            c.close()
            return r.body[0]
        print("env", os.environ.get("FLATPAK_ID"), check(), flush=True)
        with open("/.flatpak-info", "w") as f:
            f.write("[Application]\\nname=org.example.App\\n")
        try:
            print("info", check(), flush=True)
        finally:
            os.unlink("/.flatpak-info")
        """))
p = subprocess.run([sys.executable, pretender, flat_reg], capture_output=True, text=True, timeout=120,
                   env=dict(os.environ, FLATPAK_ID="org.example.App"))
out("pretend_child", (p.stdout + p.stderr).strip())
out("pretend_pinentry_runs", runs() - r0)
out("pretend_flat_regs", http(FLAT_URL, "/_admin/registrations"))

# The latency figures: the same operations through `tokenbridge uaf process` (a new process per operation, as a
# program without the service would run it), with the same pinentry and facet.
for token, user in ((PIV, "grace"), (FIDO2, "heidi")):
    k = "piv" if token == PIV else "fido2"
    for op in ("Reg", "Auth"):
        ctx = {"username": user}
        if op == "Auth":
            ctx["transaction"] = "Pay 10 CHF to Bob"
        msg = rp_request(URL, op, **ctx)
        scenario([PINS[token]])
        r = runs()
        t0 = time.time()
        p = subprocess.run([TB, "uaf", "process", "--facet-id", MY_FACET, "--token", token, "--prompt", "pinentry"],
                           input=json.dumps({"uafProtocolMessage": msg}), capture_output=True, text=True,
                           timeout=120, env=dict(os.environ, SCRIPTED_PINENTRY_SCENARIO=SC))
        t1 = time.time()
        ev = times_since(r)
        ok = p.returncode == 0 and "first" in ev and "pin" in ev
        if ok:
            status = rp_respond(op, json.loads(p.stdout)["uafProtocolMessage"])
            timing[f"cli_{k}_{op.lower()}"] = {"call_to_first": ms(t0, ev["first"][0]),
                                               "pin_to_response": ms(ev["pin"][-1], t1), "status": status}
        else:
            timing[f"cli_{k}_{op.lower()}"] = {"error": f"{p.returncode} {p.stderr.strip()[-300:]}"}
out("timing", timing)
seen = []
try:
    with watcher.filter(MatchRule(type="signal", interface=REQ)) as q:
        while True:
            seen.append(watcher.recv_until_filtered(q, timeout=0.5).header.fields.get(1))
except TimeoutError:
    pass
out("watcher_saw", seen)
c.close()
