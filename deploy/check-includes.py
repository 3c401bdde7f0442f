#!/usr/bin/env python3
"""Checks that each library includes only headers of libraries it links.

Reads the rules CMake writes at configure time (BUILD/include-rules.txt: a
library, its folders, and the folders it may include from: its own and those of
everything it links, directly or not) and scans the library's own sources and
headers (tests and their helpers, *_test.cc and *_test_util.h, excluded) for repository includes ("folder/name.h"). A header of
a folder the library does not depend on is a violation, even when it happens to
compile: it would be a dependency the build does not know.

Usage: deploy/check-includes.py BUILD_DIR; exits 1 and lists the violations.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def header_folder(path):
    # Generated protobuf headers are included as "xmod/v1/...".
    if path.startswith("xmod/v1/"):
        return "proto/xmod/v1"
    return os.path.dirname(path)


def main():
    build = sys.argv[1]
    rules = {}
    for line in open(os.path.join(build, "include-rules.txt")):
        head, _, allowed = line.partition(" : ")
        lib, own = head.split(" ", 1)
        rules[lib] = (own.split(","), set(allowed.split()))
    owned = {d for own, _ in rules.values() for d in own}
    violations, checked = [], 0
    for lib, (own, allowed) in sorted(rules.items()):
        for folder in own:
            full = os.path.join(ROOT, folder)
            if not os.path.isdir(full):
                continue  # generated sources
            for name in sorted(os.listdir(full)):
                if not name.endswith((".cc", ".h")) or name.endswith(("_test.cc", "_test_util.h")):
                    continue
                checked += 1
                for n, text in enumerate(open(os.path.join(full, name)), 1):
                    m = INCLUDE.match(text)
                    if not m:
                        continue
                    target = header_folder(m.group(1))
                    if target in owned and target not in allowed:
                        violations.append(
                            f"{folder}/{name}:{n}: {lib} includes \"{m.group(1)}\" "
                            f"but does not link the library of {target}/")
    if violations:
        print(f"check-includes: {len(violations)} includes outside the dependency graph:")
        print("\n".join("  " + v for v in violations))
        return 1
    print(f"check-includes: {checked} files of {len(rules)} libraries include only what they link")
    return 0


if __name__ == "__main__":
    sys.exit(main())
