"""The command tree as swift-argument-parser shows it: every command reached from `tokenbridge --help` answers
--help, and usage errors are exit 64 with the error's line, the usage and where help is."""
import json
import os
import subprocess

from conftest import TOKENBRIDGE

# Every command of tokenbridge: a command missing from the tree (or one added without a test) shows up here.
EXPECTED = {
    "", "tokens", "pin", "pin status", "pin set", "pin change", "pin unblock", "puk", "puk change", "key",
    "key generate", "key public", "key sign", "register", "authenticate", "deregister", "accounts",
    "authenticators", "local", "local delete", "info", "metadata", "uaf", "uaf discover", "uaf process", "oob",
    "pending", "device", "device change", "device check", "device sync", "fido2", "fido2 info", "fido2 credentials",
    "fido2 credentials list", "fido2 credentials delete", "fido2 reset", "install-desktop", "enroll", "doctor",
    "watch", "serve", "exit-codes", "provision",
}


def run(*args):
    return subprocess.run([TOKENBRIDGE, *args], capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL)


def subcommands(help_text):
    """The names listed under SUBCOMMANDS: (a "(default)" mark dropped)."""
    names, inside = [], False
    for line in help_text.splitlines():
        if line == "SUBCOMMANDS:":
            inside = True
        elif inside and line.startswith("  ") and not line.startswith("   ") and not line.startswith("  See "):
            names.append(line.split()[0])
        elif inside and not line.strip():
            inside = False
    return names


def test_every_command_answers_help():
    seen = set()
    todo = [[]]
    while todo:
        path = todo.pop()
        name = " ".join(["tokenbridge", *path])
        r = run(*path, "--help")
        assert r.returncode == 0, (path, r.stderr)
        assert r.stderr == ""
        assert r.stdout.startswith("OVERVIEW: "), path
        usage = [l for l in r.stdout.splitlines() if l.startswith("USAGE: ")]
        assert len(usage) == 1 and (usage[0] + " ").startswith(f"USAGE: {name} "), (path, usage)
        assert "OPTIONS:\n" in r.stdout and "  -h, --help" in r.stdout
        # `tokenbridge help <path>` is the same text.
        assert run("help", *path).stdout == r.stdout
        seen.add(" ".join(path))
        for s in subcommands(r.stdout):
            todo.append([*path, s])
    assert seen == EXPECTED


def test_a_group_without_subcommand_prints_its_help():
    for group in (["pin"], ["key"], ["device"], ["fido2"], []):
        r = run(*group)
        assert r.returncode == 0, (group, r.stderr)
        assert r.stdout == run(*group, "--help").stdout
        assert "SUBCOMMANDS:" in r.stdout


def test_unknown_option_is_a_usage_error():
    # A missing required argument, then the command's own checks, are reported before an unknown option (the
    # parser validates a command before it looks at what is left): each command gets what it requires.
    for cmd, required in ((["tokens"], []), (["pin", "change"], []), (["register"], ["--username", "u"]),
                          (["oob"], ["--qr-text", "x"]), (["fido2", "credentials", "delete"], ["ID"]),
                          (["doctor"], []), (["watch"], []), (["exit-codes"], []), (["metadata"], [])):
        name = " ".join(["tokenbridge", *cmd])
        r = run(*cmd, *required, "--bogus")
        assert r.returncode == 64, (cmd, r.stderr)
        assert r.stdout == ""
        lines = r.stderr.splitlines()
        assert lines[0] == "Error: Unknown option '--bogus'", cmd
        assert (lines[1] + " ").startswith(f"Usage: {name} "), lines
        assert lines[2] == f"  See '{name} --help' for more information."
        assert len(lines) == 3


def test_usage_errors_name_what_is_wrong():
    cases = [
        (["pin", "bogus"], "Error: Unexpected argument 'bogus'", "tokenbridge pin"),
        (["--json", "tokens"], "Error: Unknown option '--json'", "tokenbridge"),
        (["pin", "change", "--pin-fd"], "Error: Missing value for '--pin-fd <pin-fd>'", "tokenbridge pin change"),
        (["pin", "change", "--pin-fd", "abc"], "Error: The value 'abc' is invalid for '--pin-fd <pin-fd>'",
         "tokenbridge pin change"),
        (["tokens", "--json=yes"], "Error: The option '--json' does not take any value, but 'yes' was specified.",
         "tokenbridge tokens"),
        (["register", "--server", "https://127.0.0.1:1"], "Error: Missing expected argument '--username <username>'",
         "tokenbridge register"),
        (["local", "delete"], "Error: Missing expected argument '<key-id>'", "tokenbridge local delete"),
        (["local", "delete", "K1", "K2"], "Error: Unexpected argument 'K2'", "tokenbridge local delete"),
        (["key", "public", "--slot", "zz"],
         "Error: The value 'zz' is invalid for '--slot <slot>': 'zz' is not a PIV key slot (9a, 9c, 9d, 9e, 82-95)",
         "tokenbridge key public"),
        (["pin", "status", "--timeout", "0"], "Error: --timeout must be a number of seconds from 1 to 86400",
         "tokenbridge pin status"),
        (["help", "bogus"], "Error: Unknown command 'bogus'", "tokenbridge"),
        (["metadata", "--schema", "2"],
         "Error: The value '2' is invalid for '--schema <3|1.1>': '2' is not a statement form (3 or 1.1)",
         "tokenbridge metadata"),
        (["metadata", "7B1D#0001", "7B1D#0002"], "Error: Unexpected argument '7B1D#0002'", "tokenbridge metadata"),
    ]
    for args, first, name in cases:
        r = run(*args)
        assert r.returncode == 64, (args, r.stderr)
        assert r.stdout == ""
        lines = r.stderr.splitlines()
        assert lines[0] == first, args
        # A value's error adds the argument's help ("Help:  --pin-fd <pin-fd>  Read PINs...") before the usage.
        usage = [l for l in lines if l.startswith("Usage: ")]
        assert len(usage) == 1 and (usage[0] + " ").startswith(f"Usage: {name} "), (args, lines)
        assert lines[-1] == f"  See '{name} --help' for more information.", args
        assert len(lines) <= 4 and "Traceback" not in r.stderr and "Fatal error" not in r.stderr, lines


def test_version_everywhere():
    for args in (["--version"], ["pin", "--version"], ["pin", "status", "--json", "--version"]):
        r = run(*args)
        assert r.returncode == 0 and r.stdout.strip() and r.stdout.count("\n") == 1, args
        assert r.stdout == run("--version").stdout


def test_odd_command_lines():
    """What scripts rely on beyond the documented options (the old parser's tests, now at the command line)."""
    # "=" gives a value that starts with "-"; without it, "-1" is not taken as a value.
    r = run("pin", "change", "--pin-fd=-1")
    assert r.returncode == 64 and r.stderr.startswith("Error: --pin-fd -1 is not an open file descriptor\n")
    r = run("pin", "change", "--pin-fd", "-1")
    assert r.returncode == 64 and r.stderr.startswith("Error: Missing value for '--pin-fd <pin-fd>'\n")
    r = run("pin", "change", "--pin-fd=99999999999")
    assert r.returncode == 64 and r.stderr.startswith("Error: The value '99999999999' is invalid for '--pin-fd")
    # After "--", words are arguments, --help included.
    r = run("local", "delete", "--", "--help", "--json")
    assert r.returncode == 64 and r.stderr.startswith("Error: Unexpected argument '--json'\n"), r.stderr
    # -h, --help and -help anywhere before "--" show the command's help, even beside an error.
    for args in (["pin", "-h"], ["pin", "change", "--token", "x", "-help"], ["pin", "change", "--bogus", "--help"]):
        r = run(*args)
        assert r.returncode == 0 and r.stdout.startswith("OVERVIEW: "), (args, r.stderr)
    # A group's default subcommand takes the options.
    r = run("fido2", "credentials", "--bogus")
    assert r.returncode == 64 and "Usage: tokenbridge fido2 credentials list " in r.stderr


def test_repeated_options_keep_the_last_value(tmp_path):
    """A repeated option's last value counts (a wrapper script may add its own --server after the user's)."""
    env = dict(os.environ, HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"),
               XDG_DATA_HOME=str(tmp_path / "data"))
    r = subprocess.run([TOKENBRIDGE, "info", "--json", "--server", "https://first.example", "--server",
                        "https://second.example", "--facet-id", "x"], capture_output=True, text=True, timeout=30,
                       stdin=subprocess.DEVNULL, env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["server"] == "https://second.example"
