#!/bin/bash
# The pinentry of the plug-in test (Tests/lab/guest_enroll_systemd.sh), in bash: under TCG a Python start costs about
# a second, and the test asks for a PIN seven times. It speaks the Assuan subset tokenbridge uses and keeps
# Tests/cli/scripted_pinentry.py's files, answers and log: "$SCRIPTED_PINENTRY_SCENARIO" is {"answers": [...]}
# with PINs (digits) and "@cancel"; ".pos" is the next answer (it carries over the runs of one command); ".log"
# gets every command received. Run number N (counted in ".runs") waits, before it answers anything, while
# ".hold-N" exists (at most 120 s): the enrollment then waits in pinentry, and the test pulls the token meanwhile;
# ".held-N" says it is waiting. As Tests/cli/scripted_pinentry.py: "@hang" never answers (the caller must end the
# program: Close, a caller gone) and each run appends its pid to ".pids". ".times" gets, per run, when it started,
# read its first command and sent a PIN (run number, event, $EPOCHREALTIME), for the latency figures of
# Tests/lab/test_dbus_service.py.
s=$SCRIPTED_PINENTRY_SCENARIO
n=$(($(cat "$s.runs" 2>/dev/null || echo 0) + 1))
echo "$n" >"$s.runs"
echo "$$" >>"$s.pids"
echo "$n start $EPOCHREALTIME" >>"$s.times"
if [ -e "$s.hold-$n" ]; then
  : >"$s.held-$n"
  for _ in $(seq 600); do [ -e "$s.hold-$n" ] || break; sleep 0.2; done
fi
# The answers, one a line: the scenario's strings (PINs and @-answers have no quotes, commas or escapes).
mapfile -t answers < <(sed 's/.*"answers": *\[\(.*\)\].*/\1/' "$s" | tr ',' '\n' | sed 's/^ *"//; s/" *$//')
repeat=0
echo "OK Pleased to meet you (scripted)"
first=1
while IFS= read -r line; do
  [ $first = 1 ] && { echo "$n first $EPOCHREALTIME" >>"$s.times"; first=0; }
  echo "$line" >>"$s.log"
  verb=${line%% *}
  case "$verb" in
    SETREPEAT) repeat=1; echo OK ;;
    BYE) echo "OK closing connection"; exit 0 ;;
    GETPIN | CONFIRM)
      pos=$(cat "$s.pos" 2>/dev/null || echo 0)
      echo $((pos + 1)) >"$s.pos"
      a=${answers[$pos]:-@cancel}
      case "$a" in
        @cancel) echo "answer @cancel" >>"$s.log"; echo "ERR 83886179 Operation cancelled <Pinentry>" ;;
        @ok) echo "answer @ok" >>"$s.log"; echo OK ;;
        @hang) echo "answer @hang" >>"$s.log"; exec sleep 3600 ;;  # same pid: ending it ends the dialog
        @*) echo "scripted pinentry (bash): answer $a not supported" >&2; exit 1 ;;
        *)
          echo "answer @pin" >>"$s.log"
          echo "$n pin $EPOCHREALTIME" >>"$s.times"
          echo "D ${a:0:2}"; echo "D ${a:2}"  # over two D lines, as Assuan allows
          [ "$verb" = GETPIN ] && [ $repeat = 1 ] && echo "S PIN_REPEATED"
          echo OK ;;
      esac ;;
    *) echo OK ;;
  esac
done
