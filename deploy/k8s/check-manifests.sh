#!/usr/bin/env bash
# Validates the Kubernetes manifests against the Kubernetes API's schemas, with no
# cluster: deploy/k8s/check-manifests.mjs over the npm packages kubernetes-models
# (the API's OpenAPI schemas as validators) and yaml, installed once into a cache
# folder ($XMOD_BUILD_DIR/k8s-check, or build/k8s-check).
#   bash deploy/k8s/check-manifests.sh [FILE...]    # default: deploy/k8s/*.yaml
# Exits 0 when every document is valid, 1 when one is not (each line names the
# file, the document's first line, its kind and name, and the failing field), and
# 77 when node or the packages cannot be had (the message says what to do).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache="${XMOD_K8S_CHECK_DIR:-${XMOD_BUILD_DIR:-$repo/build}/k8s-check}"
# Versions that run on Node 18 (Debian 12) and 20 (Debian 13).
packages=(kubernetes-models@4.5.1 yaml@2.8.1)

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "check-manifests: node and npm are needed; run deploy/install-deps.sh" >&2
  exit 77
fi
files=("$@")
[ ${#files[@]} -gt 0 ] || files=("$repo"/deploy/k8s/*.yaml)
for i in "${!files[@]}"; do files[$i]=$(realpath "${files[$i]}"); done

mkdir -p "$cache"
stamp="$cache/.installed-${packages[*]// /+}"
if [ ! -f "$stamp" ]; then
  if ! (cd "$cache" && npm install --no-save --no-audit --no-fund --no-package-lock \
      "${packages[@]}" >"$cache/npm.log" 2>&1); then
    echo "check-manifests: 'npm install ${packages[*]}' failed:" >&2
    tail -n 10 "$cache/npm.log" | sed 's/^/  /' >&2
    echo "check-manifests: what to do: check that this machine reaches the npm registry" \
      "(behind a proxy, point NODE_EXTRA_CA_CERTS at its CA certificate)" >&2
    exit 77
  fi
  touch "$stamp"
fi
# Node resolves a module's imports from its own folder: the checker runs from the cache.
cp "$here/check-manifests.mjs" "$cache/check-manifests.mjs"
exec node "$cache/check-manifests.mjs" "${files[@]}"
