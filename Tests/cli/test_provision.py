"""`tokenbridge provision` on a desk of 16 virtual tokens (8 PIV cards, 8 FIDO2 keys: the most one pcscd serves in
`Tools/with-pcscd --readers 8`, see scale_fixture.py) against the reference RP. Each test runs one scenario of
provision_fixture.py beside a pcscd and an RP of its own (a nested Tools/with-pcscd) and checks the facts it prints:
the report and its CSV, the registrations the RP holds, the sealed PINs opened with `age -d` and used to sign in (a
key's after the PIN change its forcePINChange asks for), no PIN in the report, CSV, journal, output or any child's
argv, kill -9 at three points then a rerun, a registration the server stores only after the rerun asked for it
(withdrawn), a token with a blocked PIN failing alone, a finished journal rerun without
its tokens, and the refusals."""
import collections
import csv
import io
import json
import subprocess
import sys

from conftest import ROOT

SCENARIOS = {}


def scenario(name, *size):
    if (name, size) not in SCENARIOS:
        r = subprocess.run([str(ROOT / "Tools" / "with-pcscd"), "--readers", "8", "--rp", "--", sys.executable,
                            str(ROOT / "Tests" / "cli" / "provision_fixture.py"), name, *map(str, size)],
                           capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        SCENARIOS[(name, size)] = json.loads(r.stdout.splitlines()[-1])
    return SCENARIOS[(name, size)]


def no_pin_anywhere(facts, *texts):
    pins = [p for p in facts["pins"].values() if p]
    assert pins
    for text in texts + tuple(facts["argv"]):
        for p in pins:
            assert p not in text
    assert facts["pinsInJournal"] == []


def test_sixteen_tokens_are_provisioned_with_sealed_pins_that_work_and_a_report_in_the_issues_shape():
    f = scenario("full")
    assert f["first"]["rc"] == 2  # the 17th row has no token: not every row is done
    report = f["report"]
    rows = {r["username"]: r for r in report["rows"]}
    assert len(rows) == 17
    for r in report["rows"]:
        assert set(r) == {"username", "serial", "kind", "aaid", "keyID", "status", "error", "seconds", "sealedPin",
                          "note"}
    assert rows["extra00"]["status"] == "pending" and rows["extra00"]["keyID"] is None
    done = [r for r in report["rows"] if r["status"] == "done"]
    assert len(done) == 16 and report["summary"]["done"] == 16 and report["summary"]["pending"] == 1
    assert sorted(r["kind"] for r in done) == ["fido2"] * 8 + ["piv"] * 8
    assert {r["aaid"] for r in done if r["kind"] == "piv"} == {"7B1D#0001"}
    assert {r["aaid"] for r in done if r["kind"] == "fido2"} == {"7B1D#0002"}
    # The row naming a serial got that card although it is the plan's last row; the keys' serial is their id.
    assert rows["serialuser"]["serial"] == "6100007"
    assert all(rows[f"key{i:02d}"]["serial"].startswith("fido2-") for i in range(8))
    assert all(r["error"] is None for r in done)
    assert all(r["sealedPin"].startswith("-----BEGIN AGE ENCRYPTED FILE-----") for r in done)
    assert all("PIN change" in r["note"] for r in done if r["kind"] == "piv")
    # The keys (CTAP 2.1 authenticatorConfig) refuse the sealed PIN until it is changed: getInfo's forcePINChange,
    # and a sign-in with it ends "change the PIN first" (16) before the user's `pin change`.
    assert all("forcePINChange" in r["note"] for r in done if r["kind"] == "fido2")
    assert f["forced"] == {r["username"]: [True, 16] for r in done if r["kind"] == "fido2"}
    # Registrations at the RP: exactly one per done row, with the report's KeyIDs.
    at_rp = {(g["username"], g["keyID"]) for g in f["registrations"]}
    assert at_rp == {(r["username"], r["keyID"]) for r in done}
    # Each sealed PIN opens with the identity and signs in on its token.
    assert set(f["pins"]) == {r["username"] for r in done}
    for u, pin in f["pins"].items():
        assert pin and pin.isdigit() and len(pin) >= 8, u
    assert f["signIn"] == {r["username"]: 0 for r in done}
    # The CSV holds the same scalar fields.
    table = list(csv.DictReader(io.StringIO(f["csv"], newline="")))
    assert [t["username"] for t in table] == [r["username"] for r in report["rows"]]
    for t in table:
        r = rows[t["username"]]
        assert (t["status"], t["keyID"] or None, t["serial"] or None, t["sealedPin"] or None) == (
            r["status"], r["keyID"], r["serial"], r["sealedPin"])
    no_pin_anywhere(f, json.dumps(report), f["csv"], f["first"]["stdout"], f["first"]["stderr"])
    assert any("provision --plan" in a for a in f["argv"])  # the sample saw the runs' processes


def test_a_rerun_without_the_tokens_touches_nothing_done_and_keeps_the_pending_row():
    f = scenario("full")
    assert f["rerun"]["rc"] == 2
    assert f["rerunReport"]["rows"] == f["report"]["rows"]
    assert "pending" in f["rerun"]["stderr"] and "registered" not in f["rerun"]["stderr"]


def test_kill_9_at_three_points_then_a_rerun_leaves_exactly_one_registration_per_row():
    f = scenario("kill")
    kills, other = f["kills"][:3], f["kills"][3]
    assert [k["point"] for k in kills] == ["assigned", "pinSet", "registered"]
    assert all(k["hit"] for k in kills), kills
    assert other == {"other": 0}
    assert "done" not in f["kills"][0]["stages"]
    assert f["final"]["rc"] == 0, f["final"]["stderr"][-2000:]
    report = f["report"]
    assert report["summary"]["done"] == report["summary"]["rows"] == 16
    counts = collections.Counter(g["username"] for g in f["registrations"])
    assert counts == collections.Counter(r["username"] for r in report["rows"])
    assert {(g["username"], g["keyID"]) for g in f["registrations"]} == {
        (r["username"], r["keyID"]) for r in report["rows"]}
    # The registration the RP took while the run was killed was found and adopted, not made again (the kill at a PIN
    # set may leave another registration the RP took: adopted as well).
    assert sum("adopted" in (r["note"] or "") for r in report["rows"]) >= 1
    assert f["signIn"] == {r["username"]: 0 for r in report["rows"]}
    assert f["forced"] == {r["username"]: [True, 16] for r in report["rows"] if r["kind"] == "fido2"}
    no_pin_anywhere(f, json.dumps(report), f["csv"], f["final"]["stdout"], f["final"]["stderr"])
    # A finished journal: its rerun needs no token (they are gone), does nothing and exits 0.
    assert f["rerun"]["rc"] == 0 and f["rerun"]["stderr"] == ""
    assert f["rerunReport"]["rows"] == report["rows"]


def test_a_registration_the_server_stores_after_the_rerun_asked_is_withdrawn():
    f = scenario("held", 2, 2)
    assert f["hit"], f["held"]
    user = f["held"][0]
    assert f["final"]["rc"] == 0, f["final"]["stderr"][-2000:]
    report = f["report"]
    assert report["summary"]["done"] == report["summary"]["rows"] == 4
    # Exactly one registration per row at the server, and it is the one the report names.
    assert sorted(g["username"] for g in f["registrations"]) == sorted(r["username"] for r in report["rows"])
    row = next(r for r in report["rows"] if r["username"] == user)
    assert [g["keyID"] for g in f["registrations"] if g["username"] == user] == [row["keyID"]]
    assert "reached the server after this run asked for it and was withdrawn" in row["note"], row


def test_a_token_with_a_blocked_pin_fails_alone_with_its_code():
    f = scenario("faulty")
    assert f["first"]["rc"] == 2
    failed = [r for r in f["report"]["rows"] if r["status"] != "done"]
    assert [(r["serial"], r["status"], r["error"]["code"]) for r in failed] == [("6100000", "failed", 7)]
    assert "blocked" in failed[0]["error"]["message"] and failed[0]["sealedPin"] is None
    assert f["report"]["summary"]["done"] == 15
    assert len(f["registrations"]) == 15


def test_rows_with_an_out_of_band_payload_register_through_it_and_an_expired_one_fails_alone():
    f = scenario("payloads", 2, 2)
    assert f["first"]["rc"] == 2
    rows = {r["username"]: r for r in f["report"]["rows"]}
    assert rows[f["expired"]]["status"] == "failed" and rows[f["expired"]]["error"]["code"] == 28  # token expired
    done = [r for r in f["report"]["rows"] if r["status"] == "done"]
    assert len(done) == 3 and sorted(r["kind"] for r in done) == ["fido2", "fido2", "piv"]
    # Registered at the RP under the user the payload names, with the report's KeyIDs; the sealed PINs sign in.
    assert {(g["username"], g["keyID"]) for g in f["registrations"]} == {(r["username"], r["keyID"]) for r in done}
    assert f["signIn"] == {r["username"]: 0 for r in done}
    no_pin_anywhere(f, json.dumps(f["report"]), f["first"]["stdout"], f["first"]["stderr"])


def test_with_wait_tokens_plugged_in_during_the_run_take_the_rows_left():
    f = scenario("late", 1, 1)
    assert f["waited"]
    rows = {r["username"]: r for r in f["report"]["rows"]}
    assert [rows[u]["status"] for u in ("earlycard", "earlykey", "latecard", "latekey", "nobody")] == [
        "done", "done", "done", "done", "pending"]
    assert f["first"]["rc"] == 2  # the wait ended with a row still without a token
    assert rows["latecard"]["serial"] == "6100001" and rows["latekey"]["kind"] == "fido2"
    assert "waiting for tokens" in f["first"]["stderr"]
    assert sorted(g["username"] for g in f["registrations"]) == ["earlycard", "earlykey", "latecard", "latekey"]
    assert f["signIn"] == {u: 0 for u in ("earlycard", "earlykey", "latecard", "latekey")}


def test_refusals_change_no_token():
    f = scenario("refusals", 2, 2)
    assert f["noRecipient"]["rc"] == 64 and "--pin-recipient" in f["noRecipient"]["stderr"]
    assert "No token was changed" in f["noRecipient"]["stderr"]
    assert set(f["journalAfterNoRecipient"]) == {"assigned"}
    assert [t["pin"]["isDefault"] for t in f["pinStatus"] if t["kind"] == "piv"] == [True, True]
    assert all(not t["fido2"]["options"].get("clientPin") for t in f["pinStatus"] if t["kind"] == "fido2")
    assert f["parallelZero"]["rc"] == 64
    assert f["badColumn"]["rc"] == 64 and '"sn"' in f["badColumn"]["stderr"]
    assert f["otherPlan"]["rc"] == 64 and "another plan" in f["otherPlan"]["stderr"]
    assert f["badRecipient"]["rc"] == 64 and "--pin-recipient" in f["badRecipient"]["stderr"]
    # Cards with a site PIN: refused without --pin-fd, registered with it, and no PIN sealed (none was set).
    assert f["noPinFd"]["rc"] == 64 and "--pin-fd" in f["noPinFd"]["stderr"]
    assert f["withPinFd"]["rc"] == 0, f["withPinFd"]["stderr"]
    assert [(r["status"], r["sealedPin"]) for r in f["siteReport"]["rows"]] == [("done", None)] * 2
    assert sorted(g["username"] for g in f["registrations"]) == ["site0", "site1"]
    assert not any("24681357" in a for a in f["argv"])
