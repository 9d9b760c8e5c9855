"""The Debian package (Tools/package), installed as a user would, in a lab guest booted with systemd (Tools/lab
--systemd: udevd, logind, root's user manager): `dpkg -i` of a previous build, then `tokenbridge doctor` is green,
a plugged-in virtual composite token enrolls through the packaged udev rules and user unit (the packaged
/usr/bin/tokenbridge, PINs from a scripted pinentry as in test_enroll_systemd.py), no user unit is enabled, the
man page and the completions are where man and bash-completion look, the desktop entry is the tokenbridge://
handler; `dpkg -i` of the current build over it keeps the local data (a replug asks nothing); `dpkg --purge`
leaves no file of ours (every path the package listed, the maintainer scripts' state, and every file changed
since the install that names tokenbridge: listed and checked). One --systemd boot for all of it.

The package: $TB_DEB (Tools/test builds it first), else this test builds it with `Tools/package --incremental`.
The previous build: $TB_DEB_PREVIOUS when set (a real earlier .deb), else the same package repacked with the lower
version VERSION~prev1: its files are the same, so what the upgrade checks is dpkg's upgrade path through our
maintainer scripts and that nothing of it touches local data."""
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import BIN, LAB, ROOT, _lab_unavailable, _usbip_unavailable

A = "usb-1209-0001-20000001"

# Runs inside the guest: $1 the previous .deb, $2 the current one. Prints KEY=VALUE lines (one line each).
GUEST = r"""set -u
prev=$1 cur=$2
vt="$TB_BIN/virtual-token"
w=$(mktemp -d /tmp/pkg.XXXXXX); chmod 755 "$w"
export XDG_RUNTIME_DIR=/run/user/0 DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/0/bus
data=/root/.local/share/tokenbridge
python3 "$LAB_ROOT/Tools/rp/tokenbridge_rp.py" --port 0 --port-file "$w/rp.port" 2>"$w/rp.log" &
rp=$!
mkdir -p "$w/a"
"$vt" usbip --listen 127.0.0.1:3260 --device composite --state-dir "$w/a" >"$w/a.log" 2>&1 &
srv=$!
trap 'for p in $(usbip port 2>/dev/null | sed -n "s/^Port \([0-9]*\):.*/\1/p"); do usbip detach -p $p >/dev/null 2>&1; done
  kill $srv $rp 2>/dev/null' EXIT
line() { tr '\n' '|' | sed 's/|$//'; }
uptime_s() { cut -d' ' -f1 /proc/uptime; }
since_s() { python3 -c "print(round($(uptime_s) - $1, 1))"; }

# Before: nothing of ours installed. The lab's init copies the repository's rules into /etc/udev/rules.d (for
# the other lab tests); a file of that name there would shadow the package's, so it goes.
echo "before_installed=$(dpkg-query -W -f='${Status}' tokenbridge 2>/dev/null)"
rm -f /etc/udev/rules.d/70-tokenbridge.rules
udevadm control --reload
echo "before_on_path=$(command -v tokenbridge)"
# man-db's trigger (`mandb -pq`, run for every package that ships a page) rescans each section whose directory
# changed: man1 holds 18,000 pages on this host, and under TCG that took 2 minutes of CPU in each of the install,
# the upgrade and the purge. man-db's own switch turns the trigger into a message (its postinst: no
# /var/lib/man-db/auto-update, "Not building database"); our page is then indexed as the trigger would have
# indexed it, by mandb, for the one file (`mandb -f`, as user man like the trigger).
rm -f /var/lib/man-db/auto-update
marker=$w/marker; : >"$marker"; sleep 1

# The previous build, as a user installs a downloaded package.
t=$(uptime_s)
dpkg -i "$prev" >"$w/install.log" 2>&1; echo "install_rc=$?"
echo "t_install=$(since_s $t)"
echo "install_log=$(line <"$w/install.log")"
echo "installed_version=$(dpkg-query -W -f='${Version}' tokenbridge)"
echo "on_path=$(command -v tokenbridge)"
dpkg -L tokenbridge | sort >"$w/files"
echo "files=$(line <"$w/files")"
echo "rules_files=$(for f in /etc/udev/rules.d/70-tokenbridge.rules /run/udev/rules.d/70-tokenbridge.rules \
  /usr/lib/udev/rules.d/70-tokenbridge.rules /lib/udev/rules.d/70-tokenbridge.rules; do [ -e "$f" ] && realpath "$f"
  done | sort -u | line)"
echo "watch_enabled=$(systemctl --user -M root@ is-enabled tokenbridge-watch.service 2>&1)"
echo "enabled_links=$(find /etc/systemd/user /root/.config/systemd/user -name 'tokenbridge*' 2>/dev/null | line)"
echo "man_path=$(man -w tokenbridge 2>&1)"
runuser -u man -- mandb -q -f /usr/share/man/man1/tokenbridge.1.gz; echo "mandb_file_rc=$?"
echo "whatis=$(whatis tokenbridge 2>&1)"
echo "man_name=$(MANPAGER=cat MANWIDTH=200 man tokenbridge 2>/dev/null | grep -A1 -m1 '^NAME' | tail -1 | sed 's/^ *//')"
# bash-completion's loader (what an interactive bash runs at the first Tab), then a completion of "tokenbridge pi".
echo "bash_complete=$(bash -c 'source /usr/share/bash-completion/bash_completion; __load_completion tokenbridge; complete -p tokenbridge' 2>&1)"
echo "bash_words=$(bash -c 'source /usr/share/bash-completion/bash_completion; __load_completion tokenbridge
  f=$(complete -p tokenbridge | sed "s/.*-F \([^ ]*\) .*/\1/")
  COMP_WORDS=(tokenbridge pi); COMP_CWORD=1; COMP_LINE="tokenbridge pi"; COMP_POINT=${#COMP_LINE}
  $f tokenbridge pi tokenbridge; printf "%s " "${COMPREPLY[@]}"' 2>&1)"
echo "zsh_file=$(ls /usr/share/zsh/vendor-completions/_tokenbridge 2>&1)"
echo "fish_file=$(ls /usr/share/fish/vendor_completions.d/tokenbridge.fish 2>&1)"
echo "desktop_exec=$(grep '^Exec=' /usr/share/applications/tokenbridge.desktop)"
echo "mime_handler=$(grep -h '^x-scheme-handler/tokenbridge=' /usr/share/applications/mimeinfo.cache 2>&1)"
# The packaged metadata statements are what the packaged binary prints for their AAIDs without a configuration.
echo "metadata_same=$(cd /usr/share/tokenbridge/metadata && for f in *.json; do a=$(basename "$f" .json | tr - '#')
  XDG_CONFIG_HOME=$w/no-config tokenbridge metadata "$a" | cmp -s - "$f" &&
    XDG_CONFIG_HOME=$w/no-config tokenbridge metadata "$a" --schema 1.1 | cmp -s - "uaf-1.1/$f" && echo "$a"
  done | line)"

# Enrollment through the packaged units: root's user manager gets the pinentry; the configuration names the RP.
sc="$w/scenario.json"
printf '{"answers": ["1234", "1234"]}\n' >"$sc"
env -u XDG_RUNTIME_DIR -u DBUS_SESSION_BUS_ADDRESS systemctl --user -M root@ set-environment \
  PINENTRY_PROGRAM="$LAB_ROOT/Tests/lab/guest_enroll_pinentry.sh" SCRIPTED_PINENTRY_SCENARIO="$sc" PATH="$PATH"
for _ in $(seq 300); do [ -s "$w/rp.port" ] && break; sleep 0.2; done
url="http://127.0.0.1:$(cat "$w/rp.port")"
mkdir -p /root/.config/tokenbridge
printf '{"enroll": {"server": "%s", "onInsert": "auto"}}\n' "$url" >/root/.config/tokenbridge/config.json
regs() { curl -fsS "$url/_admin/registrations" | grep -o '"aaid": *"[^"]*"' | sed 's/.*: *//' | sort | paste -sd,; }
wait_ended() {  # wait_ended N: until N more tokenbridge-enroll@ units ended (bounded)
  local seen=0 c="$w/wait.cursor"
  rm -f "$c"; journalctl --no-pager -n 0 --cursor-file="$c" >/dev/null 2>&1
  for _ in $(seq 240); do
    seen=$((seen + $(journalctl --no-pager -o cat --cursor-file="$c" | grep -cE '^(Finished|Failed to start) tokenbridge-enroll@')))
    [ "$seen" -ge "$1" ] && return 0
    sleep 0.5
  done
  echo "timeout_waiting_units=$1"
}
attach() {
  for _ in $(seq 100); do usbip --tcp-port 3260 list -r 127.0.0.1 >/dev/null 2>&1 && break; sleep 0.2; done
  usbip --tcp-port 3260 attach -r 127.0.0.1 -b 1-1 >/dev/null 2>&1 || { echo "attach_failed=1"; exit 91; }
}
detach() {
  local p n; p=$(usbip port 2>/dev/null | awk '/^Port/{p=$2} /127.0.0.1:3260\//{sub(":", "", p); print p}')
  n=$(ls /sys/class/hidraw | wc -l)
  usbip detach -p "$p" >/dev/null 2>&1
  for _ in $(seq 100); do [ "$(ls /sys/class/hidraw | wc -l)" -lt "$n" ] && break; sleep 0.1; done
}
# The journal from here on (sed: up to the cursor taken now).
since=$(journalctl --no-pager -n 0 --show-cursor | sed -n 's/^-- cursor: //p')
t=$(uptime_s)
attach
wait_ended 2
echo "t_enroll=$(since_s $t)"
journalctl --no-pager -o cat --after-cursor="$since" >"$w/journal"
# What the packaged rules set on the key (the only 70-tokenbridge.rules left).
echo "udev_props=$(udevadm info -q property /dev/hidraw0 | grep -E '^(TOKENBRIDGE_TOKEN|ID_FIDO_TOKEN|SYSTEMD_USER_WANTS|CURRENT_TAGS)=' | sort | line)"
echo "enrolled_line=$(grep -m1 '^Enrolled ' "$w/journal")"
echo "units_failed=$(grep -c '^Failed to start tokenbridge-enroll@' "$w/journal")"
echo "unit_fragment=$(systemctl --user -M root@ show -p FragmentPath --value tokenbridge-enroll@hidraw0.service 2>&1)"
echo "unit_exec=$(systemctl --user -M root@ show -p ExecStart --value tokenbridge-enroll@hidraw0.service 2>&1)"
echo "regs=$(regs)"
echo "memory=$(tr -d ' \n' <"$data/enrollment.json" 2>/dev/null)"
# doctor with the token plugged in, as the user who enrolled it.
(cd / && tokenbridge doctor >"$w/doctor" 2>&1); echo "doctor_rc=$?"
echo "doctor=$(line <"$w/doctor")"
sums() { (cd / && sha256sum "$data"/* root/.config/tokenbridge/config.json 2>&1 | sed "s|$data/||") | sort | line; }
echo "data_before=$(sums)"

# The current build over it: an upgrade; the local data stays as it was, and a replug asks nothing.
t=$(uptime_s)
dpkg -i "$cur" >"$w/upgrade.log" 2>&1; echo "upgrade_rc=$?"
echo "t_upgrade=$(since_s $t)"
echo "upgrade_log=$(line <"$w/upgrade.log")"
echo "upgraded_version=$(dpkg-query -W -f='${Version}' tokenbridge)"
echo "data_after=$(sums)"
since=$(journalctl --no-pager -n 0 --show-cursor | sed -n 's/^-- cursor: //p')
detach
attach
wait_ended 2
journalctl --no-pager -o cat --after-cursor="$since" >"$w/journal2"
echo "replug_remembered=$(grep -c 'usb-1209-0001-20000001 was enrolled before' "$w/journal2")"
echo "replug_getpins=$(grep -cE '^(GETPIN|CONFIRM)' "$sc.log")"
echo "replug_regs=$(regs)"
detach

# Purge. What the package listed (directories: only those no other package uses, i.e. empty ones would be gone),
# what dpkg and the maintainer scripts keep for it, and every file changed since the install that names us.
t=$(uptime_s)
dpkg --purge tokenbridge >"$w/purge.log" 2>&1; echo "purge_rc=$?"
echo "t_purge=$(since_s $t)"
echo "purge_log=$(line <"$w/purge.log")"
echo "purged_status=$(dpkg-query -W -f='${Status}' tokenbridge 2>&1)"
left=()
while IFS= read -r f; do
  [ "$f" = /. ] && continue
  if [ -L "$f" ] && [ -d "$f" ]; then
    continue  # the system's merged-/usr links (/lib -> usr/lib), listed as the directories they stand for
  elif [ -d "$f" ]; then
    [ -n "$(ls -A "$f")" ] || left+=("$f (empty directory)")
  elif [ -e "$f" ] || [ -L "$f" ]; then left+=("$f"); fi
done <"$w/files"
echo "left_listed=$(printf '%s\n' "${left[@]}" | grep . | line)"
echo "left_dpkg=$(ls /var/lib/dpkg/info/tokenbridge.* 2>/dev/null | line)"
echo "left_state=$(find /var/lib/systemd/deb-systemd-user-helper-enabled /var/lib/systemd/deb-systemd-helper-enabled \
  /var/lib/systemd/deb-systemd-helper-masked /etc/systemd -name '*tokenbridge*' 2>/dev/null | line)"
echo "mime_after=$(grep -h 'tokenbridge' /usr/share/applications/mimeinfo.cache 2>/dev/null | line)"
echo "on_path_after=$(command -v tokenbridge)"
echo "man_after=$(man -w tokenbridge 2>&1)"
echo "whatis_after=$(whatis tokenbridge 2>&1)"
# man-db's trigger runs `mandb -pq` (no purge of removed pages, for every package): its daily job (man-db.service:
# `mandb --quiet` as user man) drops the entry of a page that is gone. That job rescans every section (4 minutes
# under TCG); mandb for our one file does what it does for our page (a file that is gone: its entry deleted).
t=$(uptime_s)
runuser -u man -- mandb -q -f /usr/share/man/man1/tokenbridge.1.gz >/dev/null 2>&1; echo "mandb_rc=$?"
echo "t_mandb=$(since_s $t)"
echo "whatis_daily=$(whatis tokenbridge 2>&1)"
# Every file created, replaced, rewritten or deleted since the install: the guest's root is an overlay over the
# host's files, so each such file is in its upper layer (lab-init exposes it read-only at /run/lab/overlay/upper; a
# deleted one as a whiteout), and those newer than the marker are the ones since the install. (A find over the
# whole root stats every file of the 9p lower layer: 160 s under TCG; over changed directories only, 54 s.)
t=$(uptime_s)
up=/run/lab/overlay/upper
if [ -d "$up" ]; then
  (cd "$up" && find . \( -path ./work -o -path ./root -o -path ./home -o -path ./opt -o -path ./tmp \
    -o -path ./var/tmp -o -path ./var/log -o -path ./run -o -path ".$LAB_ROOT" \) -prune -o \
    ! -type d -newer "$marker" -print 2>/dev/null) | sed 's|^\.||' | sort -u >"$w/changed"
else
  echo "no_upper_layer=1"
  : >"$w/changed"
fi
echo "t_find=$(since_s $t)"
echo "changed=$(line <"$w/changed")"
naming=()
while IFS= read -r f; do
  case "$f" in *tokenbridge*) naming+=("$f"); continue ;; esac
  [ -f "$f" ] && [ "$(stat -c %s "$f")" -lt 50000000 ] && grep -qa tokenbridge "$f" && naming+=("$f (content)")
done <"$w/changed"
echo "changed_naming=$(printf '%s\n' "${naming[@]}" | grep . | line)"
echo "user_data_kept=$(ls "$data" 2>/dev/null | line)"
echo "done=1"
"""


def _deb():
    deb = os.environ.get("TB_DEB")
    if deb:
        if not Path(deb).is_file():
            pytest.fail(f"TB_DEB={deb}: no such package (Tools/package failed: see its output above)")
        return Path(deb)
    r = subprocess.run([str(ROOT / "Tools" / "package"), "--incremental"], capture_output=True, text=True,
                       timeout=3600)
    assert r.returncode == 0, r.stderr[-4000:]
    return Path(r.stdout.strip().splitlines()[-1])


def _previous(deb):
    """$TB_DEB_PREVIOUS, else `deb` repacked as VERSION~prev1 (sorts before VERSION: dpkg upgrades over it)."""
    if os.environ.get("TB_DEB_PREVIOUS"):
        return Path(os.environ["TB_DEB_PREVIOUS"])
    work = ROOT / ".build-package" / "previous"
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(parents=True)
    subprocess.run(["dpkg-deb", "-R", str(deb), str(work / "tree")], check=True)
    control = work / "tree" / "DEBIAN" / "control"
    text = control.read_text()
    version = re.search(r"^Version: (\S+)$", text, re.M).group(1)
    control.write_text(re.sub(r"^Version: .*$", f"Version: {version}~prev1", text, flags=re.M))
    out = work / f"tokenbridge_{version}~prev1.deb"
    # Uncompressed (-Znone): a stand-in for an earlier build, not the artifact; xz took 9.3 CPU-s to pack it here and
    # 2.2 s to unpack it in the TCG guest.
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Znone", "-b", str(work / "tree"), str(out)], check=True,
                   capture_output=True)
    return out


@pytest.fixture(scope="module")
def pkg():
    reason = _lab_unavailable() or _usbip_unavailable()
    if reason:
        pytest.skip(reason)
    deb = _deb()
    prev = _previous(deb)
    r = subprocess.run([LAB, "run", "--systemd", "--", "bash", "-c", GUEST, "guest", str(prev), str(deb)],
                       capture_output=True, text=True, timeout=1800, env={**os.environ, "TB_BIN": str(BIN)})
    out = dict(l.split("=", 1) for l in r.stdout.splitlines() if "=" in l and l.split("=", 1)[0].isidentifier())
    assert r.returncode == 0 and out.get("done") == "1", r.stdout[-4000:] + r.stderr[-2000:]
    out["version"] = subprocess.run(["dpkg-deb", "-f", str(deb), "Version"], capture_output=True, text=True,
                                    check=True).stdout.strip()
    (ROOT / ".lab").mkdir(exist_ok=True)
    (ROOT / ".lab" / "test_package.guest.log").write_text(r.stdout)  # the whole KEY=VALUE record, for a look
    print("\nin the guest (s): " + ", ".join(f"{k[2:]} {out[k]}" for k in out if k.startswith("t_")))
    return out


def listed(value):
    return [x for x in value.split("|") if x]


def test_installs_over_nothing_with_the_packaged_files(pkg):
    assert pkg["before_installed"] == "" and pkg["before_on_path"] == ""
    assert pkg["install_rc"] == "0", pkg["install_log"]
    assert pkg["installed_version"] == pkg["version"] + "~prev1" or os.environ.get("TB_DEB_PREVIOUS")
    assert pkg["on_path"] == "/usr/bin/tokenbridge"
    files = listed(pkg["files"])
    for f in ["/usr/bin/tokenbridge", "/lib/udev/rules.d/70-tokenbridge.rules",
              "/usr/lib/systemd/user/tokenbridge-enroll@.service", "/usr/lib/systemd/user/tokenbridge-watch.service",
              "/usr/share/applications/tokenbridge.desktop", "/usr/share/man/man1/tokenbridge.1.gz",
              "/usr/share/bash-completion/completions/tokenbridge", "/usr/share/zsh/vendor-completions/_tokenbridge",
              "/usr/share/fish/vendor_completions.d/tokenbridge.fish", "/usr/share/doc/tokenbridge/README.md.gz",
              "/usr/share/doc/tokenbridge/HardwareNotes.md.gz", "/usr/share/doc/tokenbridge/copyright",
              "/usr/share/tokenbridge/metadata/7B1D-0001.json", "/usr/share/tokenbridge/metadata/7B1D-0002.json",
              "/usr/share/tokenbridge/metadata/uaf-1.1/7B1D-0001.json",
              "/usr/share/tokenbridge/metadata/uaf-1.1/7B1D-0002.json",
              # Web pages (docs/web-pages.md): the native-messaging host, its manifests, the extension.
              "/usr/libexec/tokenbridge/browser-host",
              "/usr/lib/mozilla/native-messaging-hosts/org.tokenbridge.uaf.json",
              "/etc/chromium/native-messaging-hosts/org.tokenbridge.uaf.json",
              "/usr/share/tokenbridge/browser/tokenbridge-uaf.xpi",
              "/usr/share/tokenbridge/browser/extension/manifest.json"]:
        assert f in files, files
    assert pkg["metadata_same"] == "7B1D#0001|7B1D#0002", pkg["metadata_same"]
    # No test tool in the user's package.
    assert not [f for f in files if "virtual-token" in f or "/Tests/" in f or "/Tools/" in f], files
    # The packaged rules are the only ones of that name (the lab's copy in /etc was removed first), and udev
    # applied them to the plugged-in key (TOKENBRIDGE_TOKEN and the enrollment unit come from nothing else).
    assert pkg["rules_files"] in ("/usr/lib/udev/rules.d/70-tokenbridge.rules", "/lib/udev/rules.d/70-tokenbridge.rules"), \
        pkg["rules_files"]
    props = listed(pkg["udev_props"])
    assert "TOKENBRIDGE_TOKEN=fido2" in props and "SYSTEMD_USER_WANTS=tokenbridge-enroll@hidraw0.service" in props, props
    assert any(p.startswith("CURRENT_TAGS=") and ":uaccess:" in p for p in props), props


def test_no_user_unit_is_enabled(pkg):
    assert pkg["watch_enabled"] == "disabled"
    assert pkg["enabled_links"] == ""


def test_man_page_and_completions_are_found(pkg):
    assert pkg["man_path"] == "/usr/share/man/man1/tokenbridge.1.gz"
    assert pkg["man_name"].startswith("tokenbridge"), pkg["man_name"]
    # mandb indexed it (what man-db's trigger does, for our file only: see the guest script)
    assert pkg["mandb_file_rc"] == "0" and pkg["whatis"].startswith("tokenbridge (1)"), pkg["whatis"]
    assert re.fullmatch(r"complete (-o \S+ )*-F _tokenbridge tokenbridge", pkg["bash_complete"]), pkg["bash_complete"]
    assert "pin" in pkg["bash_words"].split(), pkg["bash_words"]
    assert pkg["zsh_file"] == "/usr/share/zsh/vendor-completions/_tokenbridge"
    assert pkg["fish_file"] == "/usr/share/fish/vendor_completions.d/tokenbridge.fish"


def test_desktop_entry_handles_tokenbridge_links(pkg):
    assert pkg["desktop_exec"] == "Exec=/usr/bin/tokenbridge oob %u"
    # desktop-file-utils' trigger registered it: the only handler of the scheme.
    assert pkg["mime_handler"] == "x-scheme-handler/tokenbridge=tokenbridge.desktop;"


def test_plugged_in_token_enrolls_through_the_packaged_unit(pkg):
    assert pkg["unit_fragment"] == "/usr/lib/systemd/user/tokenbridge-enroll@.service"
    assert "argv[]=/usr/bin/tokenbridge enroll --device hidraw0 --prompt pinentry ;" in pkg["unit_exec"], pkg["unit_exec"]
    assert pkg["enrolled_line"].startswith(f"Enrolled fido2-hidraw0 ({A}) for root at http://127.0.0.1:"), pkg
    assert pkg["units_failed"] == "0"
    assert pkg["regs"] == '"7B1D#0002"'
    assert pkg["memory"] == f'{{"{A}":"enrolled"}}'


def test_doctor_is_green(pkg):
    doctor = pkg["doctor"].split("|")
    assert pkg["doctor_rc"] == "0" and not [l for l in doctor if l.startswith("FAIL")], doctor
    assert any(re.match(r"ok   udev rules: (/usr)?/lib/udev/rules\.d/70-tokenbridge\.rules", l) for l in doctor), doctor


def test_upgrade_keeps_local_data(pkg):
    assert pkg["upgrade_rc"] == "0", pkg["upgrade_log"]
    assert f"over ({pkg['installed_version']})" in pkg["upgrade_log"], pkg["upgrade_log"]
    assert pkg["upgraded_version"] == pkg["version"]
    assert pkg["data_after"] == pkg["data_before"] and "tokenbridge.sqlite" in pkg["data_before"], pkg
    # The upgraded binary, run by udev again, reads that data: the token was enrolled before, nothing asked.
    assert int(pkg["replug_remembered"]) >= 1
    assert pkg["replug_getpins"] == "2"  # the two PINs of the first enrollment, none since
    assert pkg["replug_regs"] == '"7B1D#0002"'


def test_purge_leaves_nothing_of_ours(pkg):
    assert pkg["purge_rc"] == "0", pkg["purge_log"]
    assert pkg["purged_status"].startswith("dpkg-query: no packages found") or pkg["purged_status"] == "", pkg
    assert pkg["left_listed"] == "", pkg["left_listed"]
    assert pkg["left_dpkg"] == "" and pkg["left_state"] == "", pkg
    assert pkg["mime_after"] == "" and pkg["on_path_after"] == ""
    # Every file changed since the install that names tokenbridge (path or content), but dpkg's own backup of its
    # status file from before the purge (rewritten by its next run; /var/log is not looked at).
    # man-db's index is shared: its trigger (mandb -pq) adds pages and leaves removed ones for its daily job, as
    # for every package; after that job (here: mandb for our file, what the job does for it) the page is gone from
    # the index too (whatis found it once installed).
    assert pkg["man_after"].startswith("No manual entry for tokenbridge"), pkg["man_after"]
    assert pkg["mandb_rc"] == "0"
    assert pkg["whatis_daily"] == "tokenbridge: nothing appropriate.", (pkg["whatis_after"], pkg["whatis_daily"])
    # The walk sees what changed (the upper layer is there, and holds at least dpkg's status file, which the purge
    # rewrote): an empty list would prove nothing.
    assert "no_upper_layer" not in pkg and "/var/lib/dpkg/status" in listed(pkg["changed"]), pkg["changed"]
    ours = [f for f in listed(pkg["changed_naming"])
            if not re.fullmatch(r"/var/lib/dpkg/(status|available)-old \(content\)", f)]
    assert ours == [], f"changed since the install: {pkg['changed']}"
    # Per-user data is the user's: purge does not reach into home directories.
    assert "tokenbridge.sqlite" in pkg["user_data_kept"]
