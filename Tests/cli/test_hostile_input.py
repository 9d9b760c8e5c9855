"""Hostile servers, hostile bytes and scripts that misbehave. The comment above each test states the behaviour it
guards; each fails on the code before the fix (see the commit that added it)."""
import json
import os
import subprocess
import tempfile

import pytest

from conftest import TOKENBRIDGE, pin_tries
from test_uaf import home, process, registered, rp, tb  # noqa: F401 (fixtures)

ESC = "\x1b"


def answer_next_request_with(server, message):
    """The server's next answer (the request leg) carries `message` as its UAF request."""
    server.fault(status=200, body=json.dumps({"statusCode": 1200, "uafRequest": message}))


def app_id(server):
    return server.url + "/nevisfido/uaf/1.1/facets"


def dereg_all(app):
    return json.dumps([{"header": {"upv": {"major": 1, "minor": 1}, "op": "Dereg", "appID": app},
                        "authenticators": [{"aaid": "", "keyID": ""}]}])


def local(home, all_rows=False):
    args = ["authenticators", "--json"] + (["--all"] if all_rows else [])
    return json.loads(tb(home, *args).stdout)


# A server answering a registration or authentication with a Dereg message destroys nothing.
@pytest.mark.parametrize("command", [["register", "--username", "bob"], ["authenticate", "--username", "alice"]])
def test_dereg_answer_to_another_operation_is_refused(card, rp, home, command):
    server = registered(card, rp, home)
    answer_next_request_with(server, dereg_all(app_id(server)))
    r = tb(home, *command, "--server", server.url, pins=["123456"])
    assert r.returncode == 24, r.stderr
    assert "with a deregistration message" in r.stderr and "nothing was processed" in r.stderr
    assert [x["username"] for x in local(home)] == ["alice"]
    assert tb(home, "authenticate", "--username", "alice", "--server", server.url, pins=["123456"]).returncode == 0


# Deregistration asked for one user: the server's "deregister everything" touches only that user.
def test_dereg_of_one_user_touches_no_other(card, rp, home):
    server = registered(card, rp, home)
    answer_next_request_with(server, dereg_all(app_id(server)))
    r = tb(home, "deregister", "--username", "bob", "--server", server.url)
    assert r.returncode == 0, r.stderr
    assert "Nothing was registered here for bob" in r.stdout
    assert [x["username"] for x in local(home)] == ["alice"]


# `uaf process` with a Dereg for another appID deletes nothing (and answers as for success).
def test_uaf_process_dereg_for_another_app_id_is_a_no_op(card, rp, home):
    server = registered(card, rp, home)
    other = rp("--facet", server.url)  # another appID whose facets trust our facet ID
    p = process(home, dereg_all(app_id(other)), server.url, pins=())
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == {"uafProtocolMessage": ""}
    assert [x["username"] for x in local(home)] == ["alice"]
    # The same request for the right appID, naming alice's key, removes exactly that key.
    key = local(home)[0]["keyID"]
    msg = json.dumps([{"header": {"upv": {"major": 1, "minor": 1}, "op": "Dereg", "appID": app_id(server)},
                       "authenticators": [{"aaid": "7B1D#0001", "keyID": key}]}])
    p = process(home, msg, server.url, pins=())
    assert p.returncode == 0, p.stderr
    assert local(home) == []


# The server cannot change the username: a registration asked for alice never stores mallory.
def test_server_cannot_change_the_username(card, rp, home):
    server = rp()
    answer_next_request_with(server, server.request("Reg", username="mallory")["uafRequest"])
    r = tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"])
    assert r.returncode == 24, r.stderr
    assert '"mallory"' in r.stderr and '"alice"' in r.stderr
    assert local(home, all_rows=True) == [] and server.registrations() == []
    assert pin_tries() == 3


def reg_with(server, **changes):
    msg = json.loads(server.request("Reg", username="alice")["uafRequest"])
    for k, v in changes.items():
        if k == "appID":
            msg[0]["header"]["appID"] = v
        else:
            msg[0][k] = v
    return json.dumps(msg)


# Bounded UAF fields are checked before the token is touched.
@pytest.mark.parametrize("changes,field", [
    ({"challenge": ""}, "challenge"),
    ({"challenge": "A" * 1000}, "challenge"),
    ({"challenge": "not base64url!!"}, "challenge"),
    ({"challenge": "AAAAAAA"}, "challenge"),  # 5 bytes: under the 8-byte minimum
    ({"username": "a" * 129}, "username"),
    ({"appID": "https://" + "a" * 520}, "appID"),
])
def test_unbounded_fields_are_refused_before_the_token(card, rp, home, changes, field):
    server = rp()
    answer_next_request_with(server, reg_with(server, **changes))
    username = changes.get("username", "alice")
    r = tb(home, "register", "--username", username, "--server", server.url, pins=["123456"])
    assert r.returncode == 24, r.stderr
    assert field in r.stderr
    assert local(home, all_rows=True) == [] and pin_tries() == 3


# Text from a server is shown with its controls escaped, never interpreted.
def test_server_text_reaches_the_terminal_escaped(card, rp, home):
    server = rp()
    evil = ESC + "]8;;http://evil.example" + "\x07click" + ESC + "]8;;\x07 \u202epay\u202c " + ESC + "[2J\x9b31m"
    # The request leg is answered normally; the response leg refuses with a hostile description.
    server.fault(skip=1, status=200, body=json.dumps({"statusCode": 1403, "description": evil}))
    r = tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"])
    assert r.returncode == 20, r.stderr
    for raw in (ESC, "\x07", "\u202e", "\x9b"):
        assert raw not in r.stderr
    assert "\\u{1B}]8;;http://evil.example\\u{7}click" in r.stderr and "\\u{202E}pay" in r.stderr
    # An appID with control characters, named in an error.
    answer_next_request_with(server, reg_with(server, appID="ftp://x" + ESC + "[31m.example"))
    r = tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"])
    assert r.returncode == 23, r.stderr
    assert ESC not in r.stderr and "\\u{1B}[31m" in r.stderr


# Configuration values are validated; a bad file names the key, the value and what is allowed.
@pytest.mark.parametrize("config,key", [
    ({"networkTimeout": 1e16}, "networkTimeout"),
    ({"interactionTimeout": "soon"}, "interactionTimeout"),
    ({"pivSlots": ["82", "zz"]}, "pivSlots"),
    ({"fido2ResidentKeys": "yes"}, "fido2ResidentKeys"),
    ({"sever": "https://typo.example"}, "sever"),
])
def test_bad_configuration_is_named(card, rp, home, tmp_path, config, key):
    server = rp()
    os.makedirs(home["XDG_CONFIG_HOME"] + "/tokenbridge", exist_ok=True)
    with open(home["XDG_CONFIG_HOME"] + "/tokenbridge/config.json", "w") as f:
        json.dump(config, f)
    r = tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"])
    assert r.returncode == 27, (r.returncode, r.stderr)
    assert f'"{key}"' in r.stderr and "config.json" in r.stderr
    assert pin_tries() == 3


# A value the token's format refuses costs no try, and the reason is said (exit 9), not hidden.
@pytest.mark.parametrize("args,pins,what", [
    (["register", "--username", "alice"], ["123456789"], "longer than 8"),
    (["register", "--username", "alice"], ["12345"], "shorter than 6"),
    (["pin", "change"], ["12345", "654321"], "shorter than 6"),
    (["pin", "unblock"], ["12345", "654321"], "shorter than 6"),
])
def test_refused_values_cost_no_try_and_say_why(card, rp, home, args, pins, what):
    server = rp()
    extra = ["--server", server.url] if args[0] == "register" else []
    r = tb(home, *args, *extra, pins=pins)
    assert r.returncode == 9, r.stderr
    assert what in r.stderr and "no try was spent" in r.stderr
    assert pins[0] not in r.stderr
    assert pin_tries() == 3
    assert local(home, all_rows=True) == []  # nothing reached the slot: no claim on it either


def run_with_fd(args, fd, timeout=60, home_env=None):
    return subprocess.run([TOKENBRIDGE, *args, "--pin-fd", str(fd)], capture_output=True, text=True,
                          timeout=timeout, pass_fds=(fd,), start_new_session=True, stdin=subprocess.DEVNULL,
                          env=dict(os.environ, **(home_env or {})))


# A 20 MB line is refused at the cap, never echoed.
def test_a_huge_pin_fd_line_is_refused(card):
    with tempfile.TemporaryFile() as f:
        f.write(b"1" * (20 << 20) + b"\n")
        f.seek(0)
        r = run_with_fd(["pin", "change"], f.fileno())
    assert r.returncode == 64, r.stderr
    assert "longer than 256 bytes" in r.stderr and "1111111111" not in r.stderr + r.stdout
    assert pin_tries() == 3


# --pin-fd honours --timeout: a descriptor that never delivers ends with exit 14.
def test_pin_fd_that_never_delivers_times_out(card):
    r_fd, w_fd = os.pipe()
    try:
        r = run_with_fd(["pin", "change", "--timeout", "2"], r_fd, timeout=60)
    finally:
        os.close(r_fd)
        os.close(w_fd)
    assert r.returncode == 14, r.stderr
    assert pin_tries() == 3
