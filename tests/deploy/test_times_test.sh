#!/bin/bash
# deploy/test-times.py on a made-up CTest log: the slowest tests in order, a WARNING
# for a test over the 60 s budget that tests/long-tests.txt does not allow and for a
# listed one past its allowance, and none for a listed one inside it.
# Usage: test_times_test.sh SOURCE_DIR
set -euo pipefail
src="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/ctest.log" <<'LOG'
  1/5 Test   #3: Fast.One ..........................   Passed    0.02 sec
  2/5 Test  #45: Slow.Unlisted ..........................***Failed   73.21 sec
  3/5 Test  #46: Slow.ListedInside ....................   Passed  100.00 sec
  4/5 Test  #47: Slow.ListedPast ....................   Passed  200.50 sec
  5/5 Test  #48: Param/Fixture.Case/x ....................***Skipped   0.01 sec
LOG
printf '# comment\nSlow.ListedInside 120 why it is long\nSlow.ListedPast 150 why it is long\n' \
  >"$work/known.txt"
out=$(python3 "$src/deploy/test-times.py" "$work/ctest.log" --known "$work/known.txt" --top 3)
echo "$out"
fail() { echo "FAILED: $1" >&2; exit 1; }
grep -q "the 3 slowest of 5 tests" <<<"$out" || fail "the header names the count"
[ "$(grep -A3 'slowest' <<<"$out" | sed -n 2p | awk '{print $2}')" = Slow.ListedPast ] ||
  fail "the slowest test comes first"
grep -q "WARNING: Slow.Unlisted took 73 s, over the 60 s budget" <<<"$out" || fail "unlisted warned"
grep -q "WARNING: Slow.ListedPast took 200 s, past its allowance of 150 s" <<<"$out" ||
  fail "a listed test past its allowance warned"
grep -q "known long test, 100 s (allowed 120 s: why it is long): Slow.ListedInside" <<<"$out" ||
  fail "a listed test inside its allowance is known"
! grep -q "WARNING: Slow.ListedInside\|Fast.One took" <<<"$out" || fail "no warning for the others"
printf 'Bad.Line notanumber\n' >"$work/bad.txt"
if python3 "$src/deploy/test-times.py" "$work/ctest.log" --known "$work/bad.txt" 2>"$work/err"; then
  fail "a malformed long-tests line is refused"
fi
grep -q "bad.txt:1: expected 'NAME SECONDS WHY'" "$work/err" || fail "the refusal names the line"
echo "test-times test passed"
