"""Self time per op from a Chrome trace written by LibTorch's profiler
(worker_bench --time CONFIG --trace FILE): an event's self time is its duration
less that of the events directly inside it on the same thread. Prints the ops
with the largest self time, per traced step.

usage: python3 trace_ops.py TRACE.json STEPS [ROWS]
"""
import collections
import json
import sys


def main():
    trace, steps = sys.argv[1], int(sys.argv[2])
    rows = int(sys.argv[3]) if len(sys.argv) > 3 else 30
    data = json.load(open(trace))
    events = data["traceEvents"] if isinstance(data, dict) else data
    spans = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and "dur" in e:
            spans[e.get("tid")].append((float(e["ts"]), float(e["dur"]), e["name"]))
    self_us = collections.Counter()
    calls = collections.Counter()
    total = 0.0
    for tid, evs in spans.items():
        evs.sort(key=lambda x: (x[0], -x[1]))
        stack = []  # [end, name, child time]
        def close(item):
            end, name, dur, child = item
            self_us[name] += dur - child
        for ts, dur, name in evs:
            while stack and stack[-1][0] <= ts:
                close(stack.pop())
            if stack:
                stack[-1][3] += dur
            else:
                total += dur
            stack.append([ts + dur, name, dur, 0.0])
            calls[name] += 1
        while stack:
            close(stack.pop())
    print(f"top-level time per step: {total / steps / 1e3:.1f} ms")
    for name, us in self_us.most_common(rows):
        print(f"{us / steps / 1e3:9.2f} ms  {100 * us / total:5.1f}%  {calls[name] // steps:5d}x  {name}")


if __name__ == "__main__":
    main()
