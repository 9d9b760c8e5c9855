"""`tokenbridge metadata`: FIDO metadata statements a UAF server can load, in the v3.0 form and the UAF 1.1 numeric
form. They validate against JSON Schemas written from the specs (Tests/cli/schemas, draft 2020-12), say what
registrations carry (the reference RP loaded with them accepts a registration of every token kind and records its
ASSERTION_INFO; loaded with a contradicting statement, it refuses with the status of that kind), and the Debian
package's rules generate them for the default AAIDs."""
import base64
import json
import os
import subprocess
import sys
import urllib.request

import jsonschema
import pytest

from conftest import ROOT, TOKENBRIDGE
from test_uaf import home, provision_attestation, rp, tb, uaf_token  # noqa: F401 (fixtures)

SCHEMAS = ROOT / "Tests" / "cli" / "schemas"
FORMS = {"3": "metadata-statement-v3.json", "1.1": "metadata-statement-uaf-1.1.json"}
AAIDS = ["7B1D#0001", "7B1D#0002"]
# The registry numbers of the strings the statements use (FIDO Registry §3.6, UAF Registry §4.1), written here.
NUMBER = {"secp256r1_ecdsa_sha256_raw": 1, "secp256r1_ecdsa_sha256_der": 2, "ecc_x962_raw": 0x100,
          "ecc_x962_der": 0x101, "basic_full": 0x3E07, "basic_surrogate": 0x3E08}


def validator(form):
    schema = json.loads((SCHEMAS / FORMS[form]).read_text())
    return jsonschema.Draft202012Validator(schema)


def errors(form, statement):
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator(form).iter_errors(statement)]


def metadata(home, *args):
    r = tb(home, "metadata", *args)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    return json.loads(r.stdout)


def der(pem_path):
    return subprocess.run(["openssl", "x509", "-in", str(pem_path), "-outform", "DER"], check=True,
                          capture_output=True).stdout


def test_the_schemas_are_draft_2020_12():
    for form in FORMS:
        schema = json.loads((SCHEMAS / FORMS[form]).read_text())
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("form", FORMS)
def test_statements_of_both_aaids_validate(home, form):
    statements = metadata(home, "--json", "--schema", form)
    assert [s["aaid"] for s in statements] == AAIDS
    for s in statements:
        assert errors(form, s) == [], s["aaid"]
        assert s["protocolFamily"] == "uaf" and s["authenticatorVersion"] == 1
        assert s["upv"] == [{"major": 1, "minor": 0}, {"major": 1, "minor": 1}]
        assert s["icon"].startswith("data:image/png;base64,") and len(s["description"]) <= 200
        assert s["isKeyRestricted"] is True and s["isFreshUserVerificationRequired"] is True
        assert s["tcDisplayContentType"] == "text/plain" and s["attestationRootCertificates"] == []
    piv, fido2 = statements
    if form == "3":
        assert piv["schema"] == 3 and piv["legalHeader"].startswith("https://fidoalliance.org/metadata/")
        assert piv["authenticationAlgorithms"] == ["secp256r1_ecdsa_sha256_der"]
        assert piv["publicKeyAlgAndEncodings"] == ["ecc_x962_raw"] and piv["cryptoStrength"] == 128
        assert [s["attestationTypes"] for s in statements] == [["basic_surrogate"]] * 2
        assert piv["keyProtection"] == ["hardware", "secure_element"] and fido2["keyProtection"] == ["software"]
        assert [s["matcherProtection"] for s in statements] == [["on_chip"]] * 2
        assert [s["attachmentHint"] for s in statements] == [["external", "wired"]] * 2
        assert [s["tcDisplay"] for s in statements] == [["any"]] * 2
        assert piv["userVerificationDetails"] == [[{"userVerificationMethod": "passcode_internal", "caDesc": {
            "base": 10, "minLength": 6, "maxRetries": 3, "blockSlowdown": 0}}]]
        assert fido2["userVerificationDetails"] == [[
            {"userVerificationMethod": "passcode_internal",
             "caDesc": {"base": 64, "minLength": 4, "maxRetries": 8, "blockSlowdown": 0}},
            {"userVerificationMethod": "presence_internal"}]]
    else:
        assert "schema" not in piv and "legalHeader" not in piv and "cryptoStrength" not in piv
        assert piv["assertionScheme"] == "UAFV1TLV" and piv["isSecondFactorOnly"] is False
        assert (piv["authenticationAlgorithm"], piv["publicKeyAlgAndEncoding"]) == (2, 0x100)
        assert [s["attestationTypes"] for s in statements] == [[15880]] * 2
        assert (piv["keyProtection"], fido2["keyProtection"]) == (0x2 | 0x8, 0x1)
        assert [(s["matcherProtection"], s["attachmentHint"], s["tcDisplay"]) for s in statements] == [(4, 6, 1)] * 2
        assert [[[m["userVerification"] for m in c] for c in s["userVerificationDetails"]] for s in statements] \
            == [[[4]], [[4, 1]]]


def test_one_aaid_alone_is_an_object_and_json_is_always_an_array(home, tmp_path):
    one = metadata(home, "7b1d#0002")  # hex digits in either case (UAF Protocol §3.1.4)
    assert isinstance(one, dict) and one["aaid"] == "7B1D#0002"
    assert metadata(home, "7B1D#0002", "--json") == [one]
    assert metadata(home) == metadata(home, "--json")
    assert metadata(home, "7B1D#0001", "--schema", "1.1")["aaid"] == "7B1D#0001"
    # The configured AAIDs are the ones stated.
    cfg = tmp_path / "config" / "tokenbridge"
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "config.json").write_text(json.dumps({"pivAAID": "7B1D#00A1", "fido2AAID": "7b1d#00a2"}))
    assert [s["aaid"] for s in metadata(home, "--json")] == ["7B1D#00A1", "7b1d#00a2"]


@pytest.mark.parametrize("args", [["1234#5678"], ["7B1D#0001x"], ["--json", "FFFF#0001"]])
def test_an_unknown_aaid_is_a_usage_error(home, args):
    r = tb(home, "metadata", *args)
    assert r.returncode == 64, r.stderr
    assert "Traceback" not in r.stderr and "Fatal error" not in r.stderr
    if "--json" in args:
        err = json.loads(r.stdout)
        assert err["exitCode"] == "64" and "No metadata statement for AAID FFFF#0001" in err["error"]
    else:
        assert r.stdout == ""
        assert r.stderr.startswith(f"tokenbridge: No metadata statement for AAID {args[0]}: ")
        assert "7B1D#0001" in r.stderr and "7B1D#0002" in r.stderr


def test_bad_arguments_are_usage_errors(home, tmp_path):
    r = tb(home, "metadata", "--schema", "2")
    assert r.returncode == 64 and "'2' is not a statement form (3 or 1.1)" in r.stderr
    r = tb(home, "metadata", "--attestation-root", str(tmp_path / "missing.pem"))
    assert r.returncode == 64 and "--attestation-root" in r.stderr  # no attestationSlot: surrogate needs no root


def test_basic_full_attestation_states_the_operators_root(home, tmp_path):
    run = lambda *a: subprocess.run(a, check=True, capture_output=True, cwd=tmp_path)
    run("openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "root.key")
    run("openssl", "req", "-x509", "-new", "-key", "root.key", "-subj", "/CN=operator root", "-days", "2",
        "-out", "root.pem")
    run("openssl", "x509", "-in", "root.pem", "-outform", "DER", "-out", "root.der")
    (tmp_path / "junk.pem").write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
    cfg = tmp_path / "config" / "tokenbridge"
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "config.json").write_text(json.dumps({"attestationSlot": "9e"}))
    r = tb(home, "metadata")
    assert r.returncode == 64 and "--attestation-root FILE" in r.stderr and "attestationSlot 9e" in r.stderr
    r = tb(home, "metadata", "--attestation-root", str(tmp_path / "junk.pem"))
    assert r.returncode == 64 and "holds no X.509 certificate" in r.stderr
    assert metadata(home, "7B1D#0002")["attestationTypes"] == ["basic_surrogate"]  # FIDO2: surrogate, no root
    root = base64.b64encode(der(tmp_path / "root.pem")).decode()  # standard base64, not url
    for form in FORMS:
        for file in ("root.pem", "root.der"):
            piv, fido2 = metadata(home, "--json", "--schema", form, "--attestation-root", str(tmp_path / file))
            assert errors(form, piv) == [] and errors(form, fido2) == []
            assert piv["attestationRootCertificates"] == [root] and fido2["attestationRootCertificates"] == []
            full, surrogate = (["basic_full"], ["basic_surrogate"]) if form == "3" else ([15879], [15880])
            assert (piv["attestationTypes"], fido2["attestationTypes"]) == (full, surrogate)


@pytest.mark.parametrize("form,change", [
    ("3", {"description": "x" * 201}),
    ("3", {"description": "Zürich"}),
    ("3", {"aaid": "7B1D0001"}),
    ("3", {"aaid": "7B1D#00G1"}),
    ("3", {"icon": "https://example.com/icon.png"}),
    ("3", {"unknownKey": 1}),
    ("3", {"schema": 2}),
    ("3", {"protocolFamily": "fido2"}),
    ("3", {"authenticationAlgorithms": []}),
    ("3", {"authenticationAlgorithms": ["SECP256R1_ECDSA_SHA256_DER"]}),
    ("3", {"keyProtection": ["software", "hardware"]}),
    ("3", {"attestationTypes": ["basic_full"]}),  # basic full without a root
    ("3", {"attestationRootCertificates": ["MIIB"]}),  # surrogate with a root
    ("3", {"attestationRootCertificates": ["MIIB-_"], "attestationTypes": ["basic_full"]}),  # base64url
    ("3", {"tcDisplayContentType": None}),
    ("3", {"userVerificationDetails": [[{"userVerification": 4}]]}),
    ("1.1", {"authenticationAlgorithms": ["secp256r1_ecdsa_sha256_der"]}),
    ("1.1", {"attestationTypes": ["basic_surrogate"]}),
    ("1.1", {"keyProtection": 0x1 | 0x2}),
    ("1.1", {"tcDisplay": 0x2}),
    ("1.1", {"attachmentHint": 0x1 | 0x2}),
    ("1.1", {"isSecondFactorOnly": "false"}),
    ("1.1", {"assertionScheme": None}),
    ("1.1", {"legalHeader": "https://fidoalliance.org/metadata/metadata-statement-legal-header/"}),
    ("1.1", {"userVerificationDetails": [[{"userVerification": 5}]]}),
])
def test_the_schemas_refuse_what_the_specs_refuse(home, form, change):
    """Each schema can fail: one field of a valid statement made wrong (None: the key removed)."""
    statement = metadata(home, "7B1D#0001", "--schema", form)
    assert errors(form, statement) == []
    for k, v in change.items():
        if v is None:
            del statement[k]
        else:
            statement[k] = v
    assert errors(form, statement) != []


def write_statements(tmp_path, name, statements):
    path = tmp_path / name
    path.write_text(json.dumps(statements))
    return str(path)


def registration_facts(server):
    with urllib.request.urlopen(server.url + "/_admin/registration-facts", timeout=10) as r:
        return json.loads(r.read())


@pytest.mark.parametrize("form", FORMS)
def test_registrations_are_what_the_statements_say(uaf_token, rp, home, tmp_path, form):
    """The RP loaded with `tokenbridge metadata` output accepts a registration of every token kind, and the
    registration's ASSERTION_INFO and attestation are the statement's (the RP records what it parsed)."""
    statements = metadata(home, "--json", "--schema", form)
    server = rp("--metadata", write_statements(tmp_path, "statements.json", statements))
    r = tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"])
    assert r.returncode == 0, r.stderr
    [facts] = registration_facts(server)
    [s] = [s for s in statements if s["aaid"] == uaf_token.aaid]
    assert facts["aaid"] == s["aaid"] and facts["authenticatorVersion"] >= s["authenticatorVersion"]
    if form == "3":
        assert [NUMBER[a] for a in s["authenticationAlgorithms"]] == [facts["authenticationAlgorithm"]]
        assert [NUMBER[k] for k in s["publicKeyAlgAndEncodings"]] == [facts["publicKeyAlgAndEncoding"]]
        assert [NUMBER[t] for t in s["attestationTypes"]] == [facts["attestationType"]]
    else:
        assert s["authenticationAlgorithm"] == facts["authenticationAlgorithm"]
        assert s["publicKeyAlgAndEncoding"] == facts["publicKeyAlgAndEncoding"]
        assert s["attestationTypes"] == [facts["attestationType"]]


@pytest.mark.parametrize("uaf_token", ["piv-virtual", "fido2-virtual"], indirect=True)
@pytest.mark.parametrize("form,change,status,why", [
    ("3", {"authenticationAlgorithms": ["secp256r1_ecdsa_sha256_raw"]}, 1495, "signature algorithm 0x2"),
    ("1.1", {"authenticationAlgorithm": 1}, 1495, "signature algorithm 0x2"),
    ("3", {"publicKeyAlgAndEncodings": ["ecc_x962_der"]}, 1494, "public key encoding 0x100"),
    ("3", {"attestationTypes": ["basic_full"]}, 1496, "surrogate attestation is not in the metadata statement"),
    ("1.1", {"authenticatorVersion": 2}, 1492, "authenticatorVersion 1 is lower than the statement's 2"),
    ("3", None, 1492, "no metadata statement for AAID"),
])
def test_a_contradicting_statement_refuses_the_registration(uaf_token, rp, home, tmp_path, form, change, status, why):
    statements = metadata(home, "--json", "--schema", form)
    if change is None:  # only the other kind's statement
        statements = [s for s in statements if s["aaid"] != uaf_token.aaid]
    else:
        for s in statements:
            s.update(change)
    server = rp("--metadata", write_statements(tmp_path, "statements.json", statements))
    r = tb(home, "register", "--username", "alice", "--server", server.url, pins=["123456"])
    assert r.returncode == 20, r.stderr
    assert str(status) in r.stderr and "Traceback" not in r.stderr
    assert why in open(server.log.name).read()
    assert server.registrations() == [] and registration_facts(server) == []


def test_basic_full_registration_chains_to_the_statements_root(card, rp, home, tmp_path):
    """The PIV statement with the operator's root (no --attestation-root at the RP: the statement's roots are the
    trust anchors); a statement naming another root refuses the registration (1496)."""
    provision_attestation(tmp_path, home)  # attestationSlot 9e, certified by root.pem; other.pem another root
    for form in FORMS:
        good = metadata(home, "--json", "--schema", form, "--attestation-root", str(tmp_path / "root.pem"))
        server = rp("--metadata", write_statements(tmp_path, f"good-{form}.json", good))
        r = tb(home, "register", "--username", f"alice-{form}", "--server", server.url, pins=["123456"])
        assert r.returncode == 0, r.stderr
        assert "basic full attestation verified" in open(server.log.name).read()
        assert [f["attestationType"] for f in registration_facts(server)] == [0x3E07]
        # --metadata twice: the PIV statement naming another root (an array of one), the FIDO2 one (an object).
        other = metadata(home, "--json", "--schema", form, "--attestation-root", str(tmp_path / "other.pem"))
        wrong = rp("--metadata", write_statements(tmp_path, f"other-{form}.json", other[:1]),
                   "--metadata", write_statements(tmp_path, f"fido2-{form}.json", good[1]))
        r = tb(home, "register", "--username", f"bob-{form}", "--server", wrong.url, pins=["123456"])
        assert r.returncode == 20 and "1496" in r.stderr, r.stderr
        assert "not issued by the trust anchor" in open(wrong.log.name).read()


def test_the_rp_refuses_a_statement_it_cannot_use(tmp_path):
    bad = write_statements(tmp_path, "bad.json", {"aaid": "7B1D#0001", "authenticationAlgorithms": ["rot13"]})
    r = subprocess.run([sys.executable, str(ROOT / "Tools" / "rp" / "tokenbridge_rp.py"), "--metadata", bad],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "not a usable UAF metadata statement" in r.stderr


def test_the_package_generates_the_statements_of_the_default_aaids(home, tmp_path):
    """debian/gen-metadata (debian/rules runs it on the release build) writes <AAID>.json (v3.0) and
    uaf-1.1/<AAID>.json for the default AAIDs, whatever the builder's own configuration says."""
    cfg = tmp_path / "config" / "tokenbridge"
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "config.json").write_text(json.dumps({"pivAAID": "7B1D#00A1", "attestationSlot": "9e"}))
    out = tmp_path / "metadata"
    r = subprocess.run([str(ROOT / "debian" / "gen-metadata"), TOKENBRIDGE, str(out)], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, **home))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.glob("*.json")) == ["7B1D-0001.json", "7B1D-0002.json"]
    assert sorted(p.name for p in (out / "uaf-1.1").glob("*.json")) == ["7B1D-0001.json", "7B1D-0002.json"]
    (cfg / "config.json").unlink()
    for aaid in AAIDS:
        name = aaid.replace("#", "-") + ".json"
        assert json.loads((out / name).read_text()) == metadata(home, aaid)
        assert json.loads((out / "uaf-1.1" / name).read_text()) == metadata(home, aaid, "--schema", "1.1")
        assert errors("3", json.loads((out / name).read_text())) == []
