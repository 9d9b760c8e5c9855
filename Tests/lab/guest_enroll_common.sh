# Shared by the guest scripts of the plug-in enrollment tests (guest_enroll_systemd.sh, guest_enroll_third_party.sh),
# sourced after they set: w (their scratch directory), url (the reference RP), sc (the pinentry scenario), data (the
# local data directory), journal_since (the journal's start for them, `@EPOCH`).

# The AAIDs registered at the RP, sorted, as a JSON list.
regs() {
  curl -fsS "$url/_admin/registrations" | grep -o '"aaid": *"[^"]*"' | sed 's/.*: *//' | sort | paste -sd, |
    sed 's/^/[/; s/$/]/'
}
# The journal as of the last snap (wait_ended takes one when it returns): one read per phase, not one per line
# printed (each read of the whole journal takes about half a second under TCG).
snap() { journalctl --no-pager -o cat --since "$journal_since" >"$w/journal"; }
journal() { cat "$w/journal"; }
# Units of tokenbridge-enroll@ that ended (finished or failed) so far.
ended() { journal | grep -cE '^(Finished|Failed to start) tokenbridge-enroll@'; }
# wait_ended N: until N units ended in all (bounded). Reads only the journal's new entries each time (a cursor
# file): reading the whole journal twice a second took CPU the enrollments need under TCG.
wait_ended() {
  local seen=0 c="$w/wait.cursor"
  rm -f "$c"
  for _ in $(seq 240); do
    seen=$((seen + $(journalctl --no-pager -o cat --since "$journal_since" --cursor-file="$c" | grep -cE '^(Finished|Failed to start) tokenbridge-enroll@')))
    [ "$seen" -ge "$1" ] && { snap; return 0; }
    sleep 0.5
  done
  echo "timeout_waiting_units=$1"
  snap
}
getpins() { grep -cE '^(GETPIN|CONFIRM)' "$sc.log" 2>/dev/null || echo 0; }
rows() { sqlite3 "$data/tokenbridge.sqlite" "select tokenID || ':' || state from authenticator order by tokenID" 2>/dev/null | tr '\n' ' '; }
memory() { tr -d ' \n' <"$data/enrollment.json" 2>/dev/null; }
# A pcscd of the module's own, started before its first plug-in: the guest may have served another module before
# (Tools/test's LAB_SYSTEMD_GUEST), and pcscd keeps what went wrong there. It adds a reader once per udev add event
# and never retries one it failed to add; a removal it did not finish holds its hotplug thread, and then no reader is
# added at all. (Its errors are in the journal: the enrollment script reports them, pcscd_log.)
fresh_pcscd() {
  local p
  p=$(pidof pcscd) && kill $p
  for _ in $(seq 100); do pidof pcscd >/dev/null || break; sleep 0.1; done
  p=$(pidof pcscd) && { kill -9 $p; sleep 0.2; }
  pcscd >/dev/null 2>&1
  for _ in $(seq 100); do [ -S /run/pcscd/pcscd.comm ] && break; sleep 0.1; done
  [ -S /run/pcscd/pcscd.comm ] || { echo "pcscd_not_started=1"; exit 92; }
}
