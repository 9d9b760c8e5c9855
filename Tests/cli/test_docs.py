"""The man page and the shell completions: generated from the command tree (Tools/gen-docs), current, working, and
installed by Tools/install-udev."""
import filecmp
import os
import shutil
import shlex
import subprocess

import pytest

from conftest import ROOT, TOKENBRIDGE

DOCS = {
    "docs/man/tokenbridge.1": "usr/local/share/man/man1/tokenbridge.1",
    "completions/tokenbridge.bash": "usr/local/share/bash-completion/completions/tokenbridge",
    "completions/_tokenbridge": "usr/local/share/zsh/site-functions/_tokenbridge",
    "completions/tokenbridge.fish": "usr/local/share/fish/vendor_completions.d/tokenbridge.fish",
}


def test_committed_docs_are_what_the_command_tree_generates():
    """Regenerates the man page (swift-argument-parser's generate-manual plugin) and the completions, and diffs."""
    r = subprocess.run([ROOT / "Tools" / "gen-docs", "--check"], capture_output=True, text=True, timeout=900,
                       cwd=ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]


@pytest.mark.parametrize("shell,file", [("bash", "tokenbridge.bash"), ("zsh", "_tokenbridge"),
                                        ("fish", "tokenbridge.fish")])
def test_the_binary_writes_the_committed_completions(shell, file):
    """The binary under test (TB_BIN) has the command tree the committed scripts were made from."""
    r = subprocess.run([TOKENBRIDGE, "--generate-completion-script", shell], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout == (ROOT / "completions" / file).read_text()


def bash_complete(line):
    """What the generated bash completion offers for `line` (the cursor at its end), run by a non-interactive bash
    as bash's `complete -F` would call it."""
    script = f"""
source {shlex.quote(str(ROOT / "completions" / "tokenbridge.bash"))}
COMP_LINE={line!r}
COMP_POINT=${{#COMP_LINE}}
read -ra COMP_WORDS <<<"$COMP_LINE"
[[ "$COMP_LINE" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1))
_tokenbridge tokenbridge "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    r = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return [w for w in r.stdout.splitlines() if w]


def test_bash_completes_subcommands_and_options():
    offered = bash_complete("tokenbridge pin ")
    assert {"status", "set", "change", "unblock"} <= set(offered), offered
    assert "tokens" not in offered  # the pin group's words, not the root's
    assert bash_complete("tokenbridge pin ch") == ["change"]
    assert {"list", "delete"} <= set(bash_complete("tokenbridge fido2 credentials "))
    assert "--pin-fd" in bash_complete("tokenbridge pin change --pin")
    assert "--slot" in bash_complete("tokenbridge key sign --s")


@pytest.mark.parametrize("shell,file", [("zsh", "_tokenbridge"), ("fish", "tokenbridge.fish")])
def test_zsh_and_fish_scripts_parse(shell, file):
    if not shutil.which(shell):
        pytest.skip(f"{shell} is not installed: its script's syntax is not checked here")
    r = subprocess.run([shell, "-n", str(ROOT / "completions" / file)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr


def test_man_page_renders():
    if not shutil.which("man"):
        pytest.skip("man is not installed (Tools/setup installs man-db and groff-base)")
    env = dict(os.environ, MANWIDTH="80", MANPAGER="cat", LC_ALL="C.UTF-8")
    r = subprocess.run(["man", "--warnings", "-l", str(ROOT / "docs" / "man" / "tokenbridge.1")],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # no groff/mdoc warning
    text = r.stdout
    assert text.startswith("TOKENBRIDGE(1)"), text[:200]
    for heading in ("NAME", "SYNOPSIS", "DESCRIPTION"):
        assert f"\n{heading}\n" in text
    # Every top-level command and the shared options, as --help lists them.
    top = subprocess.run([TOKENBRIDGE, "--help"], capture_output=True, text=True, timeout=30).stdout
    commands = top.split("SUBCOMMANDS:\n", 1)[1].split("\n\n", 1)[0]
    names = [l.split()[0] for l in commands.splitlines() if l.startswith("  ") and not l.startswith("   ")]
    assert len(names) > 15, names
    for name in names:
        assert f"     {name}" in text, name
    for option in ("--pin-fd pin-fd", "--timeout timeout", "--slot slot", "--qr-text qr-text"):
        assert option in text, option


def test_install_and_uninstall_put_the_docs_in_place(tmp_path):
    r = subprocess.run([ROOT / "Tools" / "install-udev", "--prefix", str(tmp_path), "--bin", TOKENBRIDGE],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for source, installed in DOCS.items():
        assert filecmp.cmp(ROOT / source, tmp_path / installed, shallow=False), installed
        assert f"installed {tmp_path / installed}" in r.stdout
    r = subprocess.run([ROOT / "Tools" / "install-udev", "--prefix", str(tmp_path), "--uninstall"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for installed in DOCS.values():
        assert not (tmp_path / installed).exists(), installed
