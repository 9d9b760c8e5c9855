"""Every fuzz target replays its committed corpus (Tests/fuzz-corpus/TARGET) through the normal build of
`tokenbridge-fuzz`, which checks the same properties the fuzzer does (a violated one traps). Inputs that once crashed a
target stay in its corpus as regressions. Tools/fuzz runs the fuzzer itself."""
import os
import subprocess
from pathlib import Path

import pytest

from conftest import BIN, ROOT

# The fuzz targets are not part of the release build the other CLI tests may run on (Tools/test): TB_FUZZ_BIN names
# the build that has them.
FUZZ = Path(os.environ.get("TB_FUZZ_BIN", BIN)) / "tokenbridge-fuzz"
CORPUS = ROOT / "Tests" / "fuzz-corpus"


def targets():
    out = subprocess.run([str(FUZZ), "--list"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_every_target_has_a_corpus_and_every_corpus_a_target():
    assert sorted(targets()) == sorted(p.name for p in CORPUS.iterdir() if p.is_dir())


@pytest.mark.parametrize("target", sorted(p.name for p in CORPUS.iterdir() if p.is_dir()))
def test_corpus_replays_without_a_violated_property(target):
    files = [p for p in (CORPUS / target).iterdir() if p.is_file()]
    assert files, f"{target}: empty corpus"
    assert all(p.stat().st_size <= 16 * 1024 for p in files), "corpus files stay small"
    out = subprocess.run([str(FUZZ), target, str(CORPUS / target)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"{target}: {out.stderr[-2000:]}"
    assert out.stdout.strip() == f"{target}: replayed {len(files)} inputs"


def test_replay_refuses_an_unknown_target():
    out = subprocess.run([str(FUZZ), "no-such-target", str(CORPUS)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 64
    assert "usage: tokenbridge-fuzz" in out.stderr
