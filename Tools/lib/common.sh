# Shared shell helpers for Tools/ scripts. Source it; it defines functions and sets nothing else.

tb_root() { cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd; }

# Build products (debug) once; prints the bin directory.
tb_build() {
  local root; root=$(tb_root)
  (cd "$root" && swift build --product tokenbridge >&2 && swift build --product virtual-token >&2)
  (cd "$root" && swift build --show-bin-path)
}

# Waits up to $2 seconds (default 15) for a command to succeed.
tb_wait_for() {
  local cmd=$1 limit=${2:-15} i=0
  while ! eval "$cmd" >/dev/null 2>&1; do
    i=$((i + 1))
    [ $i -ge $((limit * 10)) ] && return 1
    sleep 0.1
  done
}
