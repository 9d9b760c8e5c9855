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
