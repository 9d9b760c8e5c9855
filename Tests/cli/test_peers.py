"""Real clients we did not write (yubico-piv-tool, OpenSC's pkcs11-tool, openssl) against the virtual card,
mixed with our CLI, so the simulator and the client are each checked by someone else's code."""
import subprocess

from conftest import pin_tries, piv_tool, tb

PKCS11 = "/usr/lib/x86_64-linux-gnu/opensc-pkcs11.so"


def pkcs11(*args):
    return subprocess.run(["pkcs11-tool", "--module", PKCS11, *args], capture_output=True, text=True, timeout=60)


def test_yubico_piv_tool_status(card):
    r = piv_tool("-a", "status")
    assert r.returncode == 0, r.stderr
    assert "Version:\t5.4.3" in r.stdout
    assert f"Serial Number:\t{card.serial}" in r.stdout
    assert "CHUID:\t30" in r.stdout  # our CHUID starts with the FASC-N tag
    assert "PIN tries left:\t3" in r.stdout


def test_yubico_piv_tool_pin_lifecycle(card):
    assert piv_tool("-a", "verify-pin", "-P", "123456").returncode == 0
    r = piv_tool("-a", "verify-pin", "-P", "000000")
    assert r.returncode != 0 and "2 tries left" in r.stdout + r.stderr
    # Our CLI sees what yubico-piv-tool did.
    assert "PIN: 2 tries left (of 3)" in tb("pin", "status").stdout
    assert piv_tool("-a", "change-pin", "-P", "123456", "-N", "654321").returncode == 0
    assert tb("pin", "change", pins=["654321", "111111"]).returncode == 0  # and the reverse
    assert piv_tool("-a", "verify-pin", "-P", "111111").returncode == 0
    for _ in range(3):
        piv_tool("-a", "verify-pin", "-P", "000000")
    assert pin_tries() == 0
    assert tb("pin", "status", "--json").returncode == 0
    r = piv_tool("-a", "verify-pin", "-P", "111111")
    assert r.returncode != 0 and "blocked" in (r.stdout + r.stderr).lower()
    assert piv_tool("-a", "unblock-pin", "-P", "12345678", "-N", "222222").returncode == 0
    assert piv_tool("-a", "verify-pin", "-P", "222222").returncode == 0


def test_yubico_piv_tool_change_puk(card):
    assert piv_tool("-a", "change-puk", "-P", "12345678", "-N", "87654321").returncode == 0
    assert tb("pin", "unblock", pins=["87654321", "333333"]).returncode == 0
    assert piv_tool("-a", "verify-pin", "-P", "333333").returncode == 0


def test_yubico_piv_tool_generate_matches_our_public_key(card, tmp_path):
    pub = tmp_path / "pub.pem"
    r = piv_tool("-a", "generate", "-s", "9d", "-A", "ECCP256", "-o", str(pub))
    assert r.returncode == 0, r.stderr
    ours = tb("key", "public", "--slot", "9d")
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.strip() == pub.read_text().strip()


def test_yubico_piv_tool_refuses_wrong_management_key(card, tmp_path):
    r = piv_tool("-k", "11" * 24, "-a", "generate", "-s", "9a", "-A", "ECCP256", "-o", str(tmp_path / "p.pem"))
    assert r.returncode != 0
    assert tb("key", "public", "--slot", "9a").returncode == 11


def test_pkcs11_tool_signs_with_a_key_we_generated(card, tmp_path):
    r = tb("key", "generate", "--slot", "9a")
    assert r.returncode == 0, r.stderr
    pub = tmp_path / "pub.pem"
    pub.write_text(r.stdout)
    # OpenSC shows a PIV key only with a certificate: make one for our public key (signed by a throwaway key,
    # OpenSC does not check it) and import it with yubico-piv-tool (chained PUT DATA).
    ca = tmp_path / "ca.key"
    cert = tmp_path / "cert.pem"
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(ca)], check=True)
    subprocess.run(["openssl", "x509", "-new", "-subj", "/CN=tokenbridge test", "-key", str(ca), "-force_pubkey",
                    str(pub), "-days", "2", "-out", str(cert)], check=True, capture_output=True)
    assert piv_tool("-a", "import-certificate", "-s", "9a", "-i", str(cert)).returncode == 0
    objs = pkcs11("-O")
    assert "Certificate for PIV Authentication" in objs.stdout, objs.stdout + objs.stderr
    data = tmp_path / "data"
    data.write_bytes(b"signed through PKCS#11")
    digest = tmp_path / "digest"
    digest.write_bytes(subprocess.run(["openssl", "dgst", "-sha256", "-binary", str(data)], capture_output=True,
                                      check=True).stdout)
    sig = tmp_path / "sig"
    r = pkcs11("--login", "--pin", "123456", "--sign", "--mechanism", "ECDSA", "--id", "01", "-i", str(digest),
               "--signature-format", "openssl", "-o", str(sig))
    assert r.returncode == 0, r.stderr
    v = subprocess.run(["openssl", "dgst", "-sha256", "-verify", str(pub), "-signature", str(sig), str(data)],
                       capture_output=True, text=True)
    assert "Verified OK" in v.stdout
    # A wrong PIN through PKCS#11 spends a try that our CLI then reports.
    r = pkcs11("--login", "--pin", "000000", "--sign", "--mechanism", "ECDSA", "--id", "01", "-i", str(digest),
               "-o", str(sig))
    assert r.returncode != 0
    assert pin_tries() == 2
    assert "PIN: 2 tries left (of 3)" in tb("pin", "status").stdout
