# shellcheck shell=bash
# Sourced by the script tests: expect WANT_RC GREP_TEXT -- command... runs the command, and
# counts a failure in $fails (printing its output) unless it exits WANT_RC and prints GREP_TEXT.
fails=0
expect() {
  local want=$1 text=$2 out rc
  shift 3
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" != "$want" ] || ! grep -qF -- "$text" <<< "$out"; then
    echo "FAILED: $* -> rc $rc (want $want), output:"; echo "$out" | sed 's/^/  /'; fails=$((fails + 1))
  else
    echo "ok: $* -> rc $rc"
  fi
}
