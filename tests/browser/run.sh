#!/bin/bash
# The dashboard's browser tests (dashboard.mjs) in headless Chromium: Debian's
# chromium, driven by playwright-core from npm (installed once into BUILD_DIR from
# this folder's package-lock.json). Screenshots go to BUILD_DIR/browser-artifacts.
# Exits 77 (skipped), saying why, without node, npm or chromium, or when npm
# cannot fetch playwright-core.
# Usage: run.sh SOURCE_DIR BUILD_DIR BIN_DIR [SCRIPT]   (SCRIPT: relative to SOURCE_DIR;
#        default tests/browser/dashboard.mjs; bench/dashboard_render.mjs times the pages)
set -uo pipefail
src="$1" build="$2" bin="$3" script="${4:-tests/browser/dashboard.mjs}"
for tool in node npm; do
  command -v "$tool" >/dev/null 2>&1 || { echo "SKIPPED: no $tool (deploy/install-deps.sh installs it)"; exit 77; }
done
chromium=${XMOD_CHROMIUM:-/usr/bin/chromium}
[ -x "$chromium" ] || { echo "SKIPPED: no $chromium (deploy/install-deps.sh installs Debian's chromium)"; exit 77; }
cache="$build/browser-tests"
mkdir -p "$cache"
if ! cmp -s "$src/tests/browser/package-lock.json" "$cache/package-lock.json" ||
   [ ! -d "$cache/node_modules/playwright-core" ]; then
  cp "$src/tests/browser/package.json" "$src/tests/browser/package-lock.json" "$cache/"
  if ! (cd "$cache" && npm ci --no-audit --no-fund >"$cache/npm.log" 2>&1); then
    echo "SKIPPED: 'npm ci' of playwright-core failed (does this machine reach the npm registry?):"
    tail -n 10 "$cache/npm.log" | sed 's/^/  /'
    rm -f "$cache/package-lock.json"
    exit 77
  fi
fi
export NODE_PATH="$cache/node_modules"
export XMOD_SOURCE_DIR="$src" XMOD_BIN_DIR="$bin" XMOD_CHROMIUM="$chromium"
export XMOD_ARTIFACTS="$build/browser-artifacts"
mkdir -p "$XMOD_ARTIFACTS"
# ES modules do not read NODE_PATH: run from a copy beside node_modules.
name=$(basename "$script")
cp "$src/$script" "$cache/$name"
exec node "$cache/$name"
