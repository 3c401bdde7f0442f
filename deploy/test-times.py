#!/usr/bin/env python3
"""Where the test command's time went: the slowest tests of a CTest log and the
tests over the per-test budget.

Reads the lines CTest prints as each test ends ("12/467 Test  #5: Name ....
Passed    3.21 sec") and prints the N slowest with their seconds, then one line
for every test over the budget (60 s on the two-core CI machine): a test with an
entry in tests/long-tests.txt (name, allowed seconds, why) is reported as known
while it stays inside its own allowance, every other one as a WARNING, so a new
slow test is seen in the run that adds it. Exits 0 whatever it finds: the budget
warns, the tests decide.

Usage: deploy/test-times.py CTEST_LOG [--top N] [--budget SECONDS] [--known FILE]
"""
import argparse
import os
import re
import sys

LINE = re.compile(r"Test\s+#\d+:\s+(\S+)\s.*?([0-9.]+) sec\s*$")


def read_times(path):
    """Test name -> seconds, from the lines CTest prints as each test ends."""
    times = {}
    with open(path, errors="replace") as log:
        for line in log:
            match = LINE.search(line)
            if match:
                times[match.group(1)] = float(match.group(2))
    return times


def read_known(path):
    """Test name -> (allowed seconds, why), from the long-test list."""
    known = {}
    if not os.path.exists(path):
        return known
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 2)
            if len(parts) < 3 or not parts[1].isdigit():
                sys.exit(f"{path}:{number}: expected 'NAME SECONDS WHY', got '{line}'")
            known[parts[0]] = (int(parts[1]), parts[2])
    return known


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--budget", type=float, default=60.0)
    parser.add_argument("--known", default=os.path.join(os.path.dirname(__file__), "..",
                                                        "tests", "long-tests.txt"))
    args = parser.parse_args()
    times = read_times(args.log)
    if not times:
        print(f"test-times: no test times in {args.log}")
        return
    known = read_known(args.known)
    ranked = sorted(times.items(), key=lambda kv: -kv[1])
    print(f"test-times: the {min(args.top, len(ranked))} slowest of {len(ranked)} tests "
          f"(seconds; {sum(times.values()):.0f} s summed over all)")
    for name, seconds in ranked[:args.top]:
        print(f"  {seconds:8.1f}  {name}")
    for name, seconds in ranked:
        if seconds <= args.budget:
            break
        if name in known and seconds <= known[name][0]:
            print(f"test-times: known long test, {seconds:.0f} s (allowed {known[name][0]} s: "
                  f"{known[name][1]}): {name}")
        elif name in known:
            print(f"test-times: WARNING: {name} took {seconds:.0f} s, past its allowance of "
                  f"{known[name][0]} s (tests/long-tests.txt)")
        else:
            print(f"test-times: WARNING: {name} took {seconds:.0f} s, over the {args.budget:.0f} s "
                  f"budget of one test (docs/architecture.md); make it smaller, or list it in "
                  f"tests/long-tests.txt with the reason")


if __name__ == "__main__":
    main()
