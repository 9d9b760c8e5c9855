"""Tools/install-udev with hostile paths and foreign files: a binary path with spaces, &, | or % gives a unit systemd
reads as that path (checked with systemd-analyze verify when it is installed, and by our own reading of systemd's
quoting otherwise); a path systemd cannot name is refused before anything is written; a failure to write ends non-zero
and leaves no half-written file; --uninstall removes only what install-udev wrote. Everything goes under a temporary
--prefix; no binary of this build is needed (a stand-in executable is named)."""
import os
import shutil
import subprocess

import pytest

from conftest import ROOT

SCRIPT = str(ROOT / "Tools" / "install-udev")
RULES = "etc/udev/rules.d/70-tokenbridge.rules"
UNIT = "etc/systemd/user/tokenbridge-enroll@.service"
SERVE_UNIT = "etc/systemd/user/tokenbridge-serve.service"
DBUS_SERVICE = "usr/local/share/dbus-1/services/org.tokenbridge.TokenBridge1.service"
MAN = "usr/local/share/man/man1/tokenbridge.1"


def install(prefix, *args):
    return subprocess.run([SCRIPT, "--prefix", str(prefix), *args], capture_output=True, text=True, timeout=60)


def stand_in(tmp_path, dirname):
    d = tmp_path / "bin" / dirname
    d.mkdir(parents=True)
    exe = d / "tokenbridge"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    return exe


def exec_start(prefix):
    lines = [l for l in (prefix / UNIT).read_text().splitlines() if l.startswith("ExecStart=")]
    assert len(lines) == 1, lines
    return lines[0][len("ExecStart="):]


def unquote_first_word(cmdline):
    """The executable systemd takes from an ExecStart value: a double-quoted first word, % specifiers undone (%% is
    a %); any other escape is not expected from install-udev."""
    assert cmdline.startswith('"'), cmdline
    end = cmdline.index('"', 1)
    word, rest = cmdline[1:end], cmdline[end + 1:]
    assert "\\" not in word and "%" not in word.replace("%%", ""), word
    return word.replace("%%", "%"), rest


@pytest.mark.parametrize("dirname", ["with space", "amp&ersand", "pi|pe", "per%ncent", "all & | % $x ;"])
def test_unit_names_the_binary_whatever_its_path(tmp_path, dirname):
    exe = stand_in(tmp_path, dirname)
    prefix = tmp_path / "root"
    r = install(prefix, "--bin", str(exe))
    assert r.returncode == 0, r.stderr
    assert f"installed {prefix / UNIT} (runs {exe})" in r.stdout
    path, rest = unquote_first_word(exec_start(prefix))
    assert path == str(exe)
    assert rest == " enroll --device %i --prompt pinentry"
    units = {"tokenbridge-enroll@.service", "tokenbridge-serve.service"}
    assert not [p for p in (prefix / UNIT).parent.iterdir() if p.name not in units]
    # The desktop service's user unit and D-Bus activation file run the same binary (docs/dbus-api.md).
    serve = [l for l in (prefix / SERVE_UNIT).read_text().splitlines() if l.startswith("ExecStart=")]
    assert unquote_first_word(serve[0][len("ExecStart="):]) == (str(exe), " serve")
    activation = [l for l in (prefix / DBUS_SERVICE).read_text().splitlines() if l.startswith("Exec=")]
    assert activation == [f'Exec="{exe}" serve']
    if shutil.which("systemd-analyze"):
        # systemd's own reading: an instance of the template, verified offline (it checks the executable exists).
        vdir = tmp_path / "verify"
        vdir.mkdir()
        shutil.copy(prefix / UNIT, vdir / "tokenbridge-enroll@hidraw0.service")
        v = subprocess.run(["systemd-analyze", "verify", "--man=no", str(vdir / "tokenbridge-enroll@hidraw0.service")],
                           capture_output=True, text=True, timeout=60)
        assert v.returncode == 0, v.stdout + v.stderr


@pytest.mark.parametrize("dirname", ['quo"te', "back\\slash", "apo'strophe", "new\nline"])
def test_a_path_systemd_cannot_name_is_refused_before_anything_is_written(tmp_path, dirname):
    exe = stand_in(tmp_path, dirname)
    prefix = tmp_path / "root"
    r = install(prefix, "--bin", str(exe))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "a unit cannot name a binary whose path holds" in r.stderr
    assert not prefix.exists() or not any(prefix.rglob("*"))


def test_a_failed_write_ends_non_zero_and_leaves_no_partial_file(tmp_path):
    exe = stand_in(tmp_path, "plain")
    prefix = tmp_path / "root"
    # The unit's place is taken by a directory: the unit cannot be written there.
    (prefix / UNIT).mkdir(parents=True)
    r = install(prefix, "--bin", str(exe))
    assert r.returncode != 0, r.stdout
    assert f"installed {prefix / UNIT}" not in r.stdout
    assert "could not write" in r.stderr
    assert list((prefix / UNIT).iterdir()) == []  # nothing was put inside it either
    leftovers = [p for p in (prefix / UNIT).parent.iterdir() if p.name != "tokenbridge-enroll@.service"]
    assert leftovers == []


def test_uninstall_removes_only_what_install_wrote(tmp_path):
    exe = stand_in(tmp_path, "plain")
    prefix = tmp_path / "root"
    assert install(prefix, "--bin", str(exe)).returncode == 0
    r = install(prefix, "--uninstall")
    assert r.returncode == 0, r.stderr
    assert f"removed {prefix / RULES}" in r.stdout and f"removed {prefix / UNIT}" in r.stdout
    assert not (prefix / RULES).exists() and not (prefix / UNIT).exists() and not (prefix / MAN).exists()
    # Files of the same names someone else wrote (a distribution's package, an administrator) stay.
    (prefix / RULES).write_text('SUBSYSTEM=="hidraw", TAG+="uaccess"\n')
    (prefix / UNIT).write_text("[Service]\nExecStart=/usr/bin/true\n")
    (prefix / MAN).write_text(".TH TOKENBRIDGE 1\nsomeone else's page\n")
    r = install(prefix, "--uninstall")
    assert r.returncode == 0, r.stderr
    for f in (RULES, UNIT, MAN):
        assert (prefix / f).exists(), f
        assert f"left {prefix / f}" in r.stderr
    assert "removed" not in r.stdout


def test_installed_rules_keep_their_version_line(tmp_path):
    """The marker line does not hide what doctor reads (the rules version)."""
    exe = stand_in(tmp_path, "plain")
    prefix = tmp_path / "root"
    assert install(prefix, "--bin", str(exe)).returncode == 0
    text = (prefix / RULES).read_text()
    source = (ROOT / "udev" / "70-tokenbridge.rules").read_text().splitlines(keepends=True)
    assert "# tokenbridge-rules-version: 2\n" in text
    assert text == source[0] + "# tokenbridge: installed by Tools/install-udev (--uninstall removes this file)\n" + "".join(
        source[1:])
    assert os.stat(prefix / RULES).st_mode & 0o777 == 0o644
