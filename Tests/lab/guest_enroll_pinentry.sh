#!/bin/bash
# The pinentry of the plug-in test (Tests/lab/guest_enroll_systemd.sh), in bash: under TCG a Python start costs about
# a second, and the test asks for a PIN seven times. It speaks the Assuan subset tokenbridge uses and keeps
# Tests/cli/scripted_pinentry.py's files, answers and log: "$SCRIPTED_PINENTRY_SCENARIO" is {"answers": [...]}
# with PINs (digits) and "@cancel"; ".pos" is the next answer (it carries over the runs of one command); ".log"
# gets every command received. Run number N (counted in ".runs") waits, before it answers anything, while
# ".hold-N" exists (at most 120 s): the enrollment then waits in pinentry, and the test pulls the token meanwhile;
# ".held-N" says it is waiting.
s=$SCRIPTED_PINENTRY_SCENARIO
n=$(($(cat "$s.runs" 2>/dev/null || echo 0) + 1))
echo "$n" >"$s.runs"
if [ -e "$s.hold-$n" ]; then
  : >"$s.held-$n"
  for _ in $(seq 600); do [ -e "$s.hold-$n" ] || break; sleep 0.2; done
fi
# The answers, one a line: the scenario's strings (PINs and @-answers have no quotes, commas or escapes).
mapfile -t answers < <(sed 's/.*"answers": *\[\(.*\)\].*/\1/' "$s" | tr ',' '\n' | sed 's/^ *"//; s/" *$//')
repeat=0
echo "OK Pleased to meet you (scripted)"
while IFS= read -r line; do
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
        @*) echo "scripted pinentry (bash): answer $a not supported" >&2; exit 1 ;;
        *)
          echo "answer @pin" >>"$s.log"
          echo "D ${a:0:2}"; echo "D ${a:2}"  # over two D lines, as Assuan allows
          [ "$verb" = GETPIN ] && [ $repeat = 1 ] && echo "S PIN_REPEATED"
          echo OK ;;
      esac ;;
    *) echo OK ;;
  esac
done
