#!/usr/bin/env bash
# A benchmark refuses what it does not know, at once and with its usage, instead of
# running minutes of measurement (issue 45): `BIN --help` prints the usage and exits
# 0; an unknown flag and a stray argument exit non-zero naming it, with the usage.
# Usage: flags_test.sh BIN
set -uo pipefail
bin=$1
fail=0
check() {  # check WHAT EXPECTED_STATUS(0|nonzero) PATTERN ARGS...
  local what=$1 want=$2 pattern=$3 out status
  shift 3
  out=$(timeout 20 "$bin" "$@" 2>&1)
  status=$?
  if [ "$status" = 124 ]; then
    echo "FAIL: $what: still running after 20 s (it measured instead of refusing)"
    fail=1
  elif { [ "$want" = 0 ] && [ "$status" != 0 ]; } || { [ "$want" != 0 ] && [ "$status" = 0 ]; }; then
    echo "FAIL: $what: exit $status"
    fail=1
  elif ! grep -q -- "$pattern" <<<"$out"; then
    echo "FAIL: $what: the output lacks '$pattern':"
    echo "$out" | head -20
    fail=1
  else
    echo "ok: $what (exit $status)"
  fi
}
check "--help prints the usage" 0 "Usage" --help
check "an unknown flag is refused with the usage" nonzero "no-such-flag" --no-such-flag
check "an unknown flag's refusal shows the usage" nonzero "Usage\|--help" --no-such-flag
check "a stray argument is refused" nonzero "stray" stray
exit "$fail"
