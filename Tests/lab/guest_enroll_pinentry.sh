#!/bin/bash
# The pinentry of the plug-in test (Tests/lab/guest_enroll_systemd.sh): Tests/cli/scripted_pinentry.py, except
# that run number N (counted in "$SCRIPTED_PINENTRY_SCENARIO.runs") waits, before it answers anything, while
# "$SCRIPTED_PINENTRY_SCENARIO.hold-N" exists (at most 120 s): the enrollment then waits in pinentry, and the test
# pulls the token meanwhile. "$SCRIPTED_PINENTRY_SCENARIO.held-N" says it is waiting.
s=$SCRIPTED_PINENTRY_SCENARIO
n=$(($(cat "$s.runs" 2>/dev/null || echo 0) + 1))
echo "$n" >"$s.runs"
if [ -e "$s.hold-$n" ]; then
  : >"$s.held-$n"
  for _ in $(seq 600); do [ -e "$s.hold-$n" ] || break; sleep 0.2; done
fi
exec python3 "$(dirname "$0")/../cli/scripted_pinentry.py" "$@"
