#!/usr/bin/env bash
# Configures and builds xmod into ./build (or $XMOD_BUILD_DIR) with Ninja and ccache.
# Run deploy/install-deps.sh first on a fresh machine. Extra arguments go to cmake's
# configure step (e.g. -DXMOD_BUILD_BENCH=OFF); XMOD_BUILD_TARGETS="a b" builds only
# those targets (and what they need) instead of everything.
set -euo pipefail
cd "$(dirname "$0")/.."
source deploy/ccache-env.sh
build_dir="${XMOD_BUILD_DIR:-build}"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${XMOD_BUILD_TYPE:-RelWithDebInfo}" "$@" >/dev/null
targets=()
for t in ${XMOD_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build_dir" -j "$(nproc)" "${targets[@]}"
