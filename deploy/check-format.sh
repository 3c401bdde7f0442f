#!/usr/bin/env bash
# Checks that every C++ file of the project follows .clang-format, as formatted
# by clang-format 14 (Debian 12's). Other versions format some constructs
# differently, so the CMake test that calls this exists only where the version
# matches. Usage: deploy/check-format.sh [CLANG_FORMAT]; exits 1 and lists the
# files that differ.
set -euo pipefail
cd "$(dirname "$0")/.."
tool="${1:-clang-format}"
mapfile -t files < <(find common orchestrator worker proto schema tests bench fuzz \
  \( -name '*.cc' -o -name '*.h' \) -not -path '*/build/*' | sort)
bad=()
for f in "${files[@]}"; do
  if ! "$tool" --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if ((${#bad[@]})); then
  echo "check-format: ${#bad[@]} of ${#files[@]} files differ from .clang-format:"
  printf '  %s\n' "${bad[@]}"
  echo "fix with: $tool -i FILE"
  exit 1
fi
echo "check-format: ${#files[@]} files follow .clang-format"
