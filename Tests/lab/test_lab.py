"""The lab itself: commands run as root in the guest, exit statuses pass through, no network but loopback,
udevd and pcscd run with the host's reader configuration masked."""


def test_status_and_output_pass_through(guest):
    r = guest.sh("echo out; echo err >&2; id -u; exit 7")
    assert r.returncode == 7
    assert r.stdout.splitlines() == ["out", "err", "0"]  # the console merges both streams


def test_guest_has_no_network_device_but_loopback(guest):
    r = guest.run("ls", "/sys/class/net")
    assert r.returncode == 0 and r.stdout.split() == ["lo"]


def test_udevd_pcscd_and_project_rules(guest):
    r = guest.sh("pidof systemd-udevd >/dev/null && pidof pcscd >/dev/null && ls /etc/udev/rules.d")
    assert r.returncode == 0, r.stdout
    assert "70-tokenbridge.rules" in r.stdout.split()
    # No host reader (vpcd) leaks in: with nothing attached pcscd has no reader.
    r = guest.sh("ls /etc/reader.conf.d | wc -l")
    assert r.stdout.strip() == "0"


def test_vhci_and_hidraw_support(guest):
    r = guest.sh("ls -d /sys/devices/platform/vhci_hcd.0 && lsmod | grep -cE '^(usbhid|vhci_hcd) '")
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "2", r.stdout
