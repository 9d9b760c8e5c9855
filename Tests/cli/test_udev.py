"""udev rules are generated from a sorted table (STYLE.md §10)."""
import subprocess

from conftest import ROOT


def rows():
    lines = (ROOT / "udev" / "tokens.tsv").read_text().splitlines()
    return [l.split("\t") for l in lines if l and not l.startswith("#")]


def test_table_is_sorted_and_unique():
    keys = [(r[0], r[1]) for r in rows()]
    assert keys == sorted(keys)
    assert len(keys) == len(set(keys))
    for vendor, product in keys:
        assert len(vendor) == 4 and len(product) == 4
        int(vendor, 16), int(product, 16)


def test_rules_are_current():
    generated = subprocess.run([str(ROOT / "Tools" / "gen-udev")], capture_output=True, text=True, check=True).stdout
    assert (ROOT / "udev" / "70-tokenbridge.rules").read_text() == generated
    fido = [r for r in rows() if "fido" in r[2]]
    # One fallback line per listed FIDO id; access by the FIDO usage (60-fido-id), not by a vendor list.
    assert generated.count('ENV{ID_FIDO_TOKEN}="1"') == len(fido)
    assert generated.count('TAG+="uaccess"') == 1
    assert 'ENV{ID_FIDO_TOKEN}=="1", TAG+="uaccess"' in generated
