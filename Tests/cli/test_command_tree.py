"""The command tree as the CLI's own parser (CommandLineCore) shows it: every command reached from
`tokenbridge --help` answers --help, and usage errors are exit 64 with one line, the usage and where help is."""
import subprocess

from conftest import TOKENBRIDGE

# Every command of tokenbridge: a command missing from the tree (or one added without a test) shows up here.
EXPECTED = {
    "", "tokens", "pin", "pin status", "pin set", "pin change", "pin unblock", "puk", "puk change", "key",
    "key generate", "key public", "key sign", "register", "authenticate", "deregister", "accounts",
    "authenticators", "local", "local delete", "info", "uaf", "uaf process", "oob", "pending", "device",
    "device change", "device check", "device sync", "fido2", "fido2 info", "fido2 credentials",
    "fido2 credentials list", "fido2 credentials delete", "fido2 reset", "install-desktop", "enroll", "doctor",
    "watch", "exit-codes",
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
    for cmd in (["tokens"], ["pin", "change"], ["register"], ["oob"], ["fido2", "credentials", "delete"],
                ["doctor"], ["watch"], ["exit-codes"]):
        name = " ".join(["tokenbridge", *cmd])
        r = run(*cmd, "--bogus")
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
    ]
    for args, first, name in cases:
        r = run(*args)
        assert r.returncode == 64, (args, r.stderr)
        lines = r.stderr.splitlines()
        assert lines[0] == first, args
        assert (lines[1] + " ").startswith(f"Usage: {name} "), (args, lines)
        assert lines[2] == f"  See '{name} --help' for more information.", args


def test_version_everywhere():
    for args in (["--version"], ["pin", "--version"], ["pin", "status", "--json", "--version"]):
        r = run(*args)
        assert r.returncode == 0 and r.stdout.strip() and r.stdout.count("\n") == 1, args
        assert r.stdout == run("--version").stdout


def test_argument_parser_is_not_linked():
    """swift-argument-parser's first parse was 72 % of a failing `pin status` (Mirror, conformance scans; issue 12).
    Its module name is in the mangled names of any of its types the binary holds."""
    with open(TOKENBRIDGE, "rb") as f:
        assert b"14ArgumentParser" not in f.read()
