"""Headless browsers with the TokenBridge extension (browser/extension) for Tests/cli/test_browser.py: Chromium
through chromedriver (Selenium), Firefox ESR through Marionette (its own remote protocol: geckodriver is not
packaged by Debian). Both get the same small interface: open a tab on a URL, run a script (sync or async) in
the current tab, switch tabs, quit. Each browser gets a profile in the test's directory, the native-messaging host
manifest there (pointing at a wrapper that runs `tokenbridge browser-host`) and `env` (the private bus)."""
import json
import os
import shutil
import signal
import socket
import subprocess
import time

from conftest import ROOT, wait_until

EXTENSION = ROOT / "browser" / "extension"
HOST_DIR = ROOT / "browser" / "host"
HOST_NAME = "org.tokenbridge.uaf"
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
FIREFOX = shutil.which("firefox-esr") or shutil.which("firefox")


def host_wrapper(tmp_path, tokenbridge):
    """browser/host/browser-host.in for this build: the path a host manifest names."""
    path = tmp_path / "browser-host"
    path.write_text((HOST_DIR / "browser-host.in").read_text().replace("@TOKENBRIDGE@", tokenbridge))
    path.chmod(0o755)
    return path


def host_manifest(browser, host_path):
    text = (HOST_DIR / f"{HOST_NAME}.{browser}.json.in").read_text().replace("@HOST@", str(host_path))
    return json.loads(text)


class Chromium:
    """Chromium 156, `--headless=new` (the only headless mode that runs extensions), the unpacked extension (none
    with `extension=False`); `prefs` go into the new profile's Preferences."""

    def __init__(self, tmp_path, host_path, env, extension=True, prefs=None):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        profile = tmp_path / "chromium-profile"
        hosts = profile / "NativeMessagingHosts"  # the per-profile host directory of a --user-data-dir
        hosts.mkdir(parents=True)
        (hosts / f"{HOST_NAME}.json").write_text(json.dumps(host_manifest("chromium", host_path)))
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        with_extension = (f"--load-extension={EXTENSION}", f"--disable-extensions-except={EXTENSION}",
                          "--disable-features=DisableLoadExtensionCommandLineSwitch") if extension else ()
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  f"--user-data-dir={profile}", *with_extension, "--ignore-certificate-errors",
                  "--no-first-run", "--no-default-browser-check"):
            opts.add_argument(a)
        if prefs:
            opts.add_experimental_option("prefs", prefs)
        self.log = tmp_path / "chromedriver.log"
        # A session of its own: no controlling terminal, as a browser started from a desktop (xdg-open then runs a
        # Terminal=true handler in a terminal emulator, not on the test's terminal).
        service = Service(executable_path=CHROMEDRIVER, log_output=str(self.log), env=dict(os.environ, **env),
                          popen_kw={"start_new_session": True})
        self.driver = webdriver.Chrome(service=service, options=opts)
        self.driver.set_script_timeout(90)

    def open(self, url, new_tab=False):
        if new_tab:
            self.driver.switch_to.new_window("tab")
        self.driver.get(url)
        return self.driver.current_window_handle

    def switch(self, handle):
        self.driver.switch_to.window(handle)

    def frame(self, index):
        """The frame `index` of the current document; None: back to the top."""
        if index is None:
            self.driver.switch_to.default_content()
        else:
            self.driver.switch_to.frame(index)

    def click(self, element_id):
        """A click as the user makes it (trusted input events), on the element with that id."""
        self.driver.find_element("id", element_id).click()

    def run(self, script, *args):
        return self.driver.execute_script(script, *args)

    def run_async(self, script, *args):
        return self.driver.execute_async_script(script, *args)

    def quit(self):
        self.driver.quit()


class Marionette:
    """Marionette's wire protocol: `<length>:<json>` packets; commands [0, id, name, params], answers
    [1, id, error, result]."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.buf = b""
        self.next = 1
        self.read()  # the greeting

    def read(self):
        while b":" not in self.buf:
            self.buf += self.recv()
        n, _, rest = self.buf.partition(b":")
        while len(rest) < int(n):
            rest += self.recv()
        self.buf = rest[int(n):]
        return json.loads(rest[:int(n)])

    def recv(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("Marionette closed the connection")
        return chunk

    def send(self, name, params=None):
        msg_id, self.next = self.next, self.next + 1
        data = json.dumps([0, msg_id, name, params or {}]).encode()
        self.sock.sendall(str(len(data)).encode() + b":" + data)
        while True:
            kind, got, error, result = self.read()
            if got == msg_id:
                if error:
                    raise RuntimeError(f"{name}: {error}")
                return result


class Firefox:
    """Firefox ESR, headless, Marionette on a free port (`marionette.port` 0: the port is written to the profile's
    MarionetteActivePort); the extension installed as a temporary add-on (none with `extension=False`); `prefs`
    added to the profile's user.js, `handlers` written as its handlers.json (what to do with a URL scheme)."""

    def __init__(self, tmp_path, host_path, env, extension=True, prefs=None, handlers=None):
        profile = tmp_path / "firefox-profile"
        profile.mkdir()
        home = tmp_path / "firefox-home"
        manifest = json.dumps(host_manifest("firefox", host_path))
        for d in (home / ".mozilla" / "native-messaging-hosts", home / ".config" / "mozilla" / "native-messaging-hosts"):
            d.mkdir(parents=True)
            (d / f"{HOST_NAME}.json").write_text(manifest)
        prefs = {"marionette.port": 0, "browser.shell.checkDefaultBrowser": False,
                 "datareporting.policy.dataSubmissionEnabled": False, "toolkit.telemetry.reportingpolicy.firstRun": False,
                 "browser.startup.homepage_override.mstone": "ignore", "app.update.disabledForTesting": True,
                 "extensions.autoDisableScopes": 0, "extensions.enabledScopes": 5,
                 "xpinstall.signatures.required": False, "network.proxy.type": 0, **(prefs or {})}
        if handlers:
            (profile / "handlers.json").write_text(json.dumps(handlers))
        (profile / "user.js").write_text("".join(f"user_pref({json.dumps(k)}, {json.dumps(v)});\n"
                                                 for k, v in prefs.items()))
        self.log = open(tmp_path / "firefox.log", "w")
        self.proc = subprocess.Popen([FIREFOX, "--headless", "--marionette", "--no-remote", "--profile", str(profile)],
                                     env=dict(os.environ, **env, HOME=str(home), MOZ_CRASHREPORTER_DISABLE="1"),
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            port_file = profile / "MarionetteActivePort"
            # The file may exist before the port is written in it.
            wait_until(lambda: port_file.exists() and port_file.read_text().strip().isdigit(),
                       "Firefox's Marionette port", timeout=90)
            self.m = Marionette(int(port_file.read_text().strip()))
            self.m.send("WebDriver:NewSession", {"acceptInsecureCerts": True})  # as geckodriver passes them
            self.m.send("WebDriver:SetTimeouts", {"script": 90000})
            if extension:
                self.m.send("Addon:Install", {"path": str(EXTENSION), "temporary": True})
        except BaseException:  # no test gets this browser to quit: it must not outlive the failed start
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            self.log.close()
            raise

    def open(self, url, new_tab=False):
        if new_tab:
            handle = self.m.send("WebDriver:NewWindow", {"type": "tab"})["handle"]
            self.switch(handle)
        self.m.send("WebDriver:Navigate", {"url": url})
        return self.m.send("WebDriver:GetWindowHandle")["value"]

    def switch(self, handle):
        self.m.send("WebDriver:SwitchToWindow", {"handle": handle, "focus": True})

    def frame(self, index):
        self.m.send("WebDriver:SwitchToFrame", {} if index is None else {"id": index})

    def click(self, element_id):
        """A click as the user makes it (trusted input events), on the element with that id."""
        element = self.m.send("WebDriver:FindElement", {"using": "css selector", "value": "#" + element_id})["value"]
        self.m.send("WebDriver:ElementClick", {"id": next(iter(element.values()))})

    def run(self, script, *args):
        return self.m.send("WebDriver:ExecuteScript", {"script": script, "args": list(args)})["value"]

    def run_async(self, script, *args):
        return self.m.send("WebDriver:ExecuteAsyncScript", {"script": script, "args": list(args)})["value"]

    def quit(self):
        try:
            self.m.send("Marionette:Quit", {"flags": ["eForceQuit"]})
        except (OSError, RuntimeError, ConnectionError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.log.close()


BROWSERS = {"chromium": Chromium, "firefox": Firefox}


def available(name):
    if name == "chromium":
        if not (CHROMIUM and CHROMEDRIVER):
            return "chromium and chromium-driver (Debian) missing: Tools/setup"
        try:
            import selenium  # noqa: F401
        except ImportError:
            return "selenium (PyPI) missing: Tools/setup"
        return None
    return None if FIREFOX else "firefox-esr (Debian) missing: Tools/setup"


def wait_for_api(browser):
    """Reloads the current page until the content scripts have given it navigator.fido (the extension may start
    after the first page loaded)."""
    end = time.monotonic() + 60
    while not browser.run("return !!(window.navigator.fido && window.navigator.fido.uaf)"):
        assert time.monotonic() < end, "the extension never gave the page navigator.fido.uaf"
        browser.run("setTimeout(() => location.reload(), 0)")
        time.sleep(1)
