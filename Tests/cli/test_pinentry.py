"""PIN prompts through pinentry (the real Debian pinentry-tty through a pty, and a scripted pinentry for the error
paths), and interaction timeouts. The virtual PIV card's PIN is 123456."""
import json
import os
import re
import sys

import pexpect

from conftest import ROOT, TOKENBRIDGE, pin_tries, piv_tool, tb

SCRIPTED = str(ROOT / "Tests" / "cli" / "scripted_pinentry.py")


def scenario(tmp_path, answers, refuse=()):
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps({"answers": answers, "refuse": list(refuse)}))
    env = {"PINENTRY_PROGRAM": SCRIPTED, "SCRIPTED_PINENTRY_SCENARIO": str(path),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_DATA_HOME": str(tmp_path / "data")}
    return env, path


def log_of(path):
    p = str(path) + ".log"
    return open(p).read().splitlines() if os.path.exists(p) else []


def decoded(line):
    return re.sub(r"%([0-9A-F]{2})", lambda m: chr(int(m.group(1), 16)), line)


def test_wrong_pin_then_right_through_pinentry(card, tmp_path):
    """No terminal, PINENTRY_PROGRAM named: the dialog shows the token, the tries and (second round) the
    last error through SETERROR; a new PIN is asked with SETREPEAT; D lines split in two are joined."""
    env, path = scenario(tmp_path, ["654321", "24681357", "123456", "24681357"])
    r = tb("pin", "change", env=env)
    assert r.returncode == 0, r.stderr
    assert "PIN changed." in r.stdout
    assert piv_tool("-a", "verify-pin", "-P", "24681357").returncode == 0
    log = [decoded(l) for l in log_of(path)]
    descs = [l for l in log if l.startswith("SETDESC ")]
    assert card.id in descs[0] and "PIN: 3 tries left (of 3) (still the default PIN: change it)" in descs[0]
    assert "SETERROR Wrong PIN; 2 tries left." in log
    assert sum(1 for l in log if l.startswith("SETREPEAT ")) == 2
    assert "SETTITLE TokenBridge" in log and "SETPROMPT Current PIN:" in log and "SETPROMPT New PIN:" in log
    assert log.count("GETPIN") == 4


def test_pin_with_a_percent_sign_is_decoded(card, tmp_path):
    assert piv_tool("-a", "change-pin", "-P", "123456", "-N", "1%2a45").returncode == 0
    env, path = scenario(tmp_path, ["1%2a45", "24681357"])
    r = tb("pin", "change", env=env)
    assert r.returncode == 0, r.stderr
    assert piv_tool("-a", "verify-pin", "-P", "24681357").returncode == 0


def test_cancel_in_pinentry_is_the_users_cancel(card, tmp_path):
    env, path = scenario(tmp_path, ["@cancel"])
    r = tb("pin", "change", env=env)
    assert r.returncode == 3, r.stderr
    assert r.stderr == "tokenbridge: Cancelled; nothing was changed on the token.\n"
    assert pin_tries() == 3


def test_pinentry_refusing_setrepeat_asks_twice(card, tmp_path):
    env, path = scenario(tmp_path, ["123456", "24681357", "11223344", "24681357", "24681357"], refuse=["SETREPEAT"])
    r = tb("pin", "change", env=env)
    assert r.returncode == 0, r.stderr
    assert piv_tool("-a", "verify-pin", "-P", "24681357").returncode == 0
    log = [decoded(l) for l in log_of(path)]
    # current; new, repeat (differs: SETERROR), new again, repeat
    assert log.count("GETPIN") == 5
    assert "SETPROMPT Repeat new PIN:" in log and "SETERROR The two entries differ." in log


def test_pinentry_missing_is_a_clear_error(card, tmp_path):
    env, _ = scenario(tmp_path, [])
    env["PINENTRY_PROGRAM"] = str(tmp_path / "no-such-pinentry")
    r = tb("pin", "change", env=env)
    assert r.returncode == 27, r.stderr
    assert r.stderr == (
        f"tokenbridge: Cannot start the pinentry program {tmp_path}/no-such-pinentry (No such file or directory): "
        "install one (e.g. pinentry-tty, pinentry-gnome3) or name it with PINENTRY_PROGRAM or \"pinentry\" in the "
        "configuration; nothing was sent to the token.\n")
    assert pin_tries() == 3


def test_pinentry_dying_mid_dialog(card, tmp_path):
    env, _ = scenario(tmp_path, ["@die"])
    r = tb("pin", "change", env=env)
    assert r.returncode == 1, r.stderr
    assert r.stderr == (
        f"tokenbridge: The pinentry program {SCRIPTED} ended before answering (GETPIN); nothing was sent to the "
        "token.\n")
    assert pin_tries() == 3


def test_pinentry_answering_garbage(card, tmp_path):
    env, _ = scenario(tmp_path, ["@garbage"])
    r = tb("pin", "change", env=env)
    assert r.returncode == 1, r.stderr
    assert "answered GETPIN with something that is not Assuan; nothing was sent to the token." in r.stderr
    assert pin_tries() == 3


def test_pinentry_not_answering_times_out(card, tmp_path):
    env, path = scenario(tmp_path, ["@hang"])
    r = tb("pin", "change", "--timeout", "2", env=env)
    assert r.returncode == 14, r.stderr
    assert r.stderr == "tokenbridge: No answer within the time allowed; nothing was changed.\n"
    assert pin_tries() == 3
    assert "SETTIMEOUT 2" in log_of(path)


def test_configured_timeout_is_used(card, tmp_path):
    """interactionTimeout in the configuration bounds the prompt when --timeout is not given."""
    env, path = scenario(tmp_path, ["@hang"])
    os.makedirs(tmp_path / "config" / "tokenbridge")
    (tmp_path / "config" / "tokenbridge" / "config.json").write_text('{"interactionTimeout": 2}')
    r = tb("pin", "change", env=env, timeout=30)
    assert r.returncode == 14, r.stderr
    assert "SETTIMEOUT 2" in log_of(path)
    assert pin_tries() == 3


def test_no_terminal_and_no_pinentry_named_is_the_old_error(card, tmp_path):
    """auto: without a terminal, a named pinentry or a display, nothing changes (no pinentry started)."""
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "PINENTRY_PROGRAM": "", "DISPLAY": "",
           "WAYLAND_DISPLAY": ""}
    r = tb("pin", "change", env=env)
    assert r.returncode == 64, r.stderr
    assert "No terminal to ask for" in r.stderr


def spawn(args, env):
    child = pexpect.spawn(TOKENBRIDGE, args, encoding="utf-8", timeout=30, env=dict(os.environ, **env))
    child.logfile_read = sys.stdout
    return child


def test_terminal_prompt_times_out(card, tmp_path):
    """A PIN prompt on a terminal not answered: exit 14 after --timeout, tries and terminal untouched."""
    child = spawn(["pin", "change", "--timeout", "2"], {"XDG_CONFIG_HOME": str(tmp_path / "config")})
    child.expect("Current PIN: ")
    child.expect("No answer within the time allowed; nothing was changed.")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 14
    assert pin_tries() == 3


def test_configured_timeout_bounds_a_terminal_prompt(card, tmp_path):
    """interactionTimeout from the configuration (no --timeout) ends an unanswered terminal prompt: exit 14."""
    os.makedirs(tmp_path / "config" / "tokenbridge")
    (tmp_path / "config" / "tokenbridge" / "config.json").write_text('{"interactionTimeout": 2}')
    child = spawn(["pin", "change"], {"XDG_CONFIG_HOME": str(tmp_path / "config")})
    child.expect("Current PIN: ")
    child.expect("No answer within the time allowed; nothing was changed.", timeout=20)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 14
    assert pin_tries() == 3


def test_real_pinentry_tty_through_a_pty(card, tmp_path):
    """The configuration asks for pinentry and names Debian's pinentry-tty; it draws on our terminal."""
    os.makedirs(tmp_path / "config" / "tokenbridge")
    (tmp_path / "config" / "tokenbridge" / "config.json").write_text(
        json.dumps({"prompt": "pinentry", "pinentry": "/usr/bin/pinentry-tty"}))
    child = spawn(["pin", "change"], {"XDG_CONFIG_HOME": str(tmp_path / "config"), "PINENTRY_PROGRAM": ""})
    # pinentry-tty's dialog: the description (token, tries, default PIN), then its prompt.
    child.expect(re.escape(f"({card.id})\r\nPIN: 3 tries left (of 3) (still the default PIN: change it)"))
    child.expect("Current PIN:")
    child.sendline("654321")
    child.expect("New PIN:")
    child.sendline("24681357")
    child.expect("Repeat new PIN:")
    child.sendline("24681357")
    # Second round: the error from the first is shown by pinentry-tty.
    child.expect(re.escape("*** \x1b[1;31mWrong PIN; 2 tries left.\x1b[0m ***"))
    child.expect(re.escape("PIN: 2 tries left (of 3)"))
    child.expect("Current PIN:")
    child.sendline("123456")
    child.expect("New PIN:")
    child.sendline("24681357")
    child.expect("Repeat new PIN:")
    child.sendline("24681357")
    child.expect("PIN changed.")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert piv_tool("-a", "verify-pin", "-P", "24681357").returncode == 0


def test_real_pinentry_tty_cancel_and_prompt_option(card, tmp_path):
    """--prompt pinentry with PINENTRY_PROGRAM; Ctrl-D at pinentry-tty's prompt cancels: exit 3, no try."""
    child = spawn(["pin", "change", "--prompt", "pinentry"],
                  {"XDG_CONFIG_HOME": str(tmp_path / "config"), "PINENTRY_PROGRAM": "pinentry-tty"})
    child.expect("Current PIN:")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 3
    assert pin_tries() == 3


def spend_two_tries():
    for _ in range(2):
        assert piv_tool("-a", "verify-pin", "-P", "999999").returncode != 0
    assert pin_tries() == 1


def test_last_try_is_confirmed_in_pinentry(card, tmp_path):
    """Before the last try the dialog warns, and the confirmation is a pinentry CONFIRM (OK: go on)."""
    spend_two_tries()
    env, path = scenario(tmp_path, ["123456", "24681357", "@ok"])
    r = tb("pin", "change", env=env)
    assert r.returncode == 0, r.stderr
    assert piv_tool("-a", "verify-pin", "-P", "24681357").returncode == 0
    log = [decoded(l) for l in log_of(path)]
    assert any("This is the last try: a wrong PIN now blocks it." in l for l in log if l.startswith("SETDESC "))
    assert "CONFIRM" in log


def test_last_try_not_confirmed_in_pinentry(card, tmp_path):
    spend_two_tries()
    env, path = scenario(tmp_path, ["123456", "24681357", "@cancel"])
    r = tb("pin", "change", env=env)
    assert r.returncode == 3, r.stderr
    assert r.stderr == "tokenbridge: Cancelled; nothing was changed on the token.\n"
    assert pin_tries() == 1


def test_touch_not_given_times_out_at_the_interaction_timeout(tmp_path):
    """A FIDO2 key waiting for a touch nobody gives (it would wait ~30 s itself, --presence wait: forever):
    --timeout ends it with exit 14, nothing registered at the server or locally."""
    from fido2_conn import Key
    from test_uaf import RelyingParty
    k = Key(tmp_path, "--presence", "wait")
    server = RelyingParty(tmp_path)
    home = {"TOKENBRIDGE_VIRTUAL_FIDO": k.sock, "XDG_DATA_HOME": str(tmp_path / "d"),
            "XDG_CONFIG_HOME": str(tmp_path / "c")}
    try:
        assert tb("pin", "set", env=home, pins=["1234"]).returncode == 0
        r = tb("register", "--username", "alice", "--server", server.url, "--timeout", "2", env=home, pins=["1234"],
               timeout=30)
        assert r.returncode == 14, r.stderr
        assert r.stderr.endswith("tokenbridge: The key was not touched in time; nothing was done.\n"), r.stderr
        assert server.registrations() == []
        assert json.loads(tb("authenticators", "--all", "--json", env=home).stdout) == []
    finally:
        server.stop()
        k.stop()


def test_fido2_pin_set_through_pinentry(tmp_path):
    """A FIDO2 key's first PIN: one dialog with the rules as the constraints hint and the repetition."""
    from fido2_conn import Key
    k = Key(tmp_path)
    try:
        env, path = scenario(tmp_path, ["pässwört"])
        env["TOKENBRIDGE_VIRTUAL_FIDO"] = k.sock
        r = tb("pin", "set", env=env)
        assert r.returncode == 0, r.stderr
        log = [decoded(l) for l in log_of(path)]
        hint = next(l for l in log if l.startswith("OPTION constraints-hint-short="))
        assert "4" in hint
        assert any(l.startswith("SETREPEAT ") for l in log) and log.count("GETPIN") == 1
        desc = next(l for l in log if l.startswith("SETDESC "))
        assert "has no PIN yet." in desc
    finally:
        k.stop()


def test_ctrl_c_in_real_pinentry_tty_is_the_users_cancel(card, tmp_path):
    """Ctrl-C reaches pinentry-tty too (same terminal): the dialog ends as the user's cancel (exit 3), not as
    an interrupted program (130)."""
    child = spawn(["pin", "change", "--prompt", "pinentry"],
                  {"XDG_CONFIG_HOME": str(tmp_path / "config"), "PINENTRY_PROGRAM": "pinentry-tty"})
    child.expect("Current PIN:")
    child.sendintr()
    child.expect("Cancelled; nothing was changed on the token.")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 3
    assert pin_tries() == 3
