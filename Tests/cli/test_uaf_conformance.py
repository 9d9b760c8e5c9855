"""FIDO UAF Protocol v1.1's rules on requests, tried through every front end the way the FIDO Alliance's UAF client
test procedures try a client: each message of `uaf_negative.CASES` through the D-Bus service's CheckPolicy and
ProcessUAFOperation and through `tokenbridge uaf process`, with a PIV card and a FIDO2 key present. Each gets the
exact ErrorCode (and exit code), no PIN dialog, and a message that breaks a rule reaches neither token (the
simulators count every APDU and CTAPHID message they receive: `--pause-dir`, RequestPause). And DiscoveryData,
the same from Discover and from `uaf discover --json`."""
import json
import os
import subprocess

import pytest

from conftest import ROOT, TOKENBRIDGE, tb
from fido2_conn import Key
from implementations import UAF_PIN
from test_dbus_service import (MY_FACET, bus, call, home, pinentry_log, pinentry_pids, process,  # noqa: F401
                               response, scenario, unwrap)
from test_uaf import process as uaf_process
from test_uaf import rp as rps  # noqa: F401 (fixture)
from uaf_negative import EXIT, accepted_variants, negative_messages
from uaf_shapes import FIDO2_AUTHENTICATOR, PIV_AUTHENTICATOR, check_discovery_data


class Counted:
    """A virtual PIV card and a virtual FIDO2 key (PIN set), each counting the requests it receives."""

    def __init__(self, tmp_path, cards):
        self.piv_dir, self.fido_dir = tmp_path / "piv-requests", tmp_path / "fido-requests"
        self.piv_dir.mkdir()
        self.fido_dir.mkdir()
        self.card = cards(args=("--pause-dir", str(self.piv_dir)))
        self.key = Key(tmp_path, "--pause-dir", str(self.fido_dir))
        self.env = {"TOKENBRIDGE_VIRTUAL_FIDO": self.key.sock}
        r = tb("pin", "set", "--token", "fido2-fido-sock", env=self.env, pins=[UAF_PIN])
        assert r.returncode == 0, r.stderr

    def counts(self):
        def count(d):
            p = d / "count"
            return int(p.read_text()) if p.exists() else 0
        return count(self.piv_dir), count(self.fido_dir)


@pytest.fixture
def counted(tmp_path, cards):
    t = Counted(tmp_path, cards)
    yield t
    t.key.stop()


def messages(server):
    return negative_messages(lambda op: server.request(op, **({"username": "alice"} if op == "Reg" else {}))["uafRequest"])


def test_negative_messages_through_the_service(counted, bus, rps, tmp_path):
    server = rps("--facet", MY_FACET)
    c = bus(counted.env).connect()
    for name, message, code, early in messages(server):
        before = counted.counts()
        assert call(c, "CheckPolicy", "sa{sv}", message, {}) == (code,), name
        rcode, results, _ = response(c, process(c, message))
        assert (rcode, results["errorCode"], results["exitStatus"]) == (2, code, EXIT[code]), (name, results)
        if early:
            assert counted.counts() == before, f"{name}: a token was asked"
    assert pinentry_log(tmp_path) == "" and pinentry_pids(tmp_path) == []
    assert server.registrations() == []
    # The same edits keeping every rule are accepted: the refusals above are the rules', not the edits'.
    reg = server.request("Reg", username="alice")["uafRequest"]
    before = counted.counts()
    for name, message in accepted_variants(reg):
        assert call(c, "CheckPolicy", "sa{sv}", message, {}) == (0,), name
    # ... and those reach the tokens (CheckPolicy lists them): the counters above can tell.
    assert all(after > was for after, was in zip(counted.counts(), before)), (before, counted.counts())


def test_negative_messages_through_uaf_process(counted, rps, home):
    server = rps()
    facet = server.url  # the appID's own origin: trusted without a list (AppID and Facet §3.1.2)
    env = dict(home, **counted.env)
    for name, message, code, early in messages(server):
        before = counted.counts()
        p = subprocess.run([TOKENBRIDGE, "uaf", "process", "--facet-id", facet], input=json.dumps(
            {"uafProtocolMessage": message}), capture_output=True, text=True, env=dict(os.environ, **env),
            start_new_session=True, timeout=60)
        assert p.returncode == EXIT[code], (name, p.returncode, p.stderr)
        assert p.stdout == "" and "Traceback" not in p.stderr and "PIN" not in p.stderr, (name, p.stderr)
        if early:
            assert counted.counts() == before, f"{name}: a token was asked"
    assert server.registrations() == []


def test_discovery_data_from_the_service_and_the_cli(counted, bus, home):
    d = unwrap(call(bus(counted.env).connect(), "Discover")[0])
    check_discovery_data(d)
    r = tb("uaf", "discover", "--json", env=dict(home, **counted.env))
    assert r.returncode == 0, r.stderr
    cli = json.loads(r.stdout)
    check_discovery_data(cli)
    assert cli == d
    by_aaid = {a["aaid"]: a for a in d["availableAuthenticators"]}
    assert sorted(by_aaid) == ["7B1D#0001", "7B1D#0002"]
    for expected in (PIV_AUTHENTICATOR, FIDO2_AUTHENTICATOR):
        a = dict(by_aaid[expected["aaid"]])
        assert a.pop("icon").startswith("data:image/png;base64,") and a.pop("title")
        assert a == expected


def test_one_version_everywhere(counted, bus):
    """The version lives in one place (TokenBridgeVersion): --version, the Debian package's changelog and
    DiscoveryData.clientVersion say the same."""
    version = tb("--version").stdout.strip()
    changelog = (ROOT / "debian" / "changelog").read_text().split("\n", 1)[0]
    assert changelog.startswith(f"tokenbridge ({version}) "), (version, changelog)
    d = unwrap(call(bus(counted.env).connect(), "Discover")[0])
    assert tuple(d["clientVersion"]) == tuple(int(x) for x in version.split(".")[:2])


def test_the_reference_rp_takes_base64url_without_padding_only(counted, rps, home):
    """The RP is as strict as the spec on what it reads (Protocol v1.1 §3: base64url "without padding"): a padded
    fcParams is refused (1498), the same response unpadded is taken."""
    server = rps()

    def registration():
        req = server.request("Reg", username="alice")["uafRequest"]
        p = uaf_process(home, req, server.url, extra=("--token", counted.card.id))
        assert p.returncode == 0, p.stderr
        return json.loads(json.loads(p.stdout)["uafProtocolMessage"])

    response = registration()
    padded = [dict(response[0], fcParams=response[0]["fcParams"] + "=")]
    assert server.respond("Reg", json.dumps(padded)) == 1498
    assert server.registrations() == []
    assert server.respond("Reg", json.dumps(registration())) == 1200
