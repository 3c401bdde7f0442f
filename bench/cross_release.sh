#!/bin/bash
# LibTorch 2.6 (the Debian 13 tree of deploy/debian13.sh) against 1.13 (this
# Debian 12 machine), side by side in one run: every configuration is timed by
# `worker_bench --time` under one installation and then the other, round after
# round (A B A B ...), and each comparison is the median of the per-round ratios
# with their range. Also the cheapest job of the embedded demo (sweeps/demo.yaml)
# trained whole by xmod-train under each. Needs both builds (build/ here,
# /root/build in the tree) and root (chroot).
#
#   bash bench/cross_release.sh [ROUNDS]     # default 5
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
rounds="${1:-5}"
host_bin="${XMOD_BUILD_DIR:-build}/bin"
# Where deploy/debian13.sh keeps the tree: machine-wide as root, else in the checkout.
if [ -n "${XMOD_DEBIAN13_DIR:-}" ]; then
  root="$XMOD_DEBIAN13_DIR/root"
elif [ "$(id -u)" = 0 ]; then
  root=/var/cache/xmod/debian13/root
else
  root=build-debian13/root
fi
[ -x "$host_bin/worker_bench" ] || { echo "cross_release: no $host_bin/worker_bench; build first" >&2; exit 1; }
[ -f "$root/.xmod-tree-ready" ] || { echo "cross_release: no Debian 13 tree at $root; run bash deploy/debian13.sh first" >&2; exit 1; }
if [ ! -x "$root/root/build/bin/worker_bench" ]; then
  # The test command's Debian 13 leg builds no benchmarks: build this one there now
  # (Google Benchmark is needed to configure with benchmarks on).
  echo "cross_release: building worker_bench in the Debian 13 tree"
  bash deploy/debian13.sh --run 'DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libbenchmark-dev >/dev/null &&
    cmake -S . -B /root/build -DXMOD_BUILD_BENCH=ON >/dev/null &&
    cmake --build /root/build --target worker_bench xmod-train' ||
    { echo "cross_release: could not build worker_bench in the Debian 13 tree (output above)" >&2; exit 1; }
fi
threads=2
configs="dense,eager,fp32 dense,eager,bf16 dense,fused,fp32 dense,fused,bf16 dense,auto,fp32 dense,auto,bf16 xmod,auto,fp32 xmod,auto,bf16 mm,fp32 mm,bf16 dense,auto,fp32,composite xmod,auto,fp32,composite"

# The demo's cheapest job, as the tree and the host both read it (data/brown relative).
"$host_bin/xmod" expand sweeps/demo.yaml --format json >/tmp/xmod_demo_jobs.json
python3 - <<'PY'
import json
jobs = json.load(open("/tmp/xmod_demo_jobs.json"))
cheapest = min(jobs, key=lambda j: j["train_flops"])
json.dump(cheapest, open("/tmp/xmod_demo_job.json", "w"))
print(f"demo job: {cheapest['family']} {cheapest['scale']} d={cheapest['d_model']} L={cheapest['n_layers']} "
      f"T={cheapest['context']} {cheapest['steps']} steps")
PY
cp /tmp/xmod_demo_job.json "$root/xmod/demo_job.json"

out=/tmp/xmod_cross_release.txt
: >"$out"
demo_host() {
  local s e
  s=$(date +%s%N)
  "$host_bin/xmod-train" --job /tmp/xmod_demo_job.json --run-dir /tmp/xmod_cross_demo --threads $threads --quiet >/dev/null
  e=$(date +%s%N)
  echo "1.13 demo $(((e - s) / 1000))e-6" >>"$out"
}
for r in $(seq "$rounds"); do
  echo "cross_release: round $r of $rounds"
  for c in $configs; do
    "$host_bin/worker_bench" --time "$c" --steps 5 --threads $threads | sed 's/^time /1.13 /' >>"$out"
    bash deploy/debian13.sh --run "/root/build/bin/worker_bench --time $c --steps 5 --threads $threads" |
      grep '^time ' | sed 's/^time /2.6 /' >>"$out"
  done
  demo_host
  bash deploy/debian13.sh --run "s=\$(date +%s%N); /root/build/bin/xmod-train --job demo_job.json --run-dir /tmp/xmod_cross_demo --threads $threads --quiet >/dev/null; e=\$(date +%s%N); echo time demo \$(((e - s) / 1000))e-6" |
    grep '^time ' | sed 's/^time /2.6 /' >>"$out"
done

python3 - "$out" "$rounds" <<'PY'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
t = {}
for r in rows:
    if r[2] == "unavailable":
        continue
    t.setdefault((r[0], r[1]), []).append((float(r[2]), float(r[3]) if len(r) > 3 else 0.0))
def paired(a, b):
    ra = [x[0] / y[0] for x, y in zip(t[a], t[b])]
    return statistics.median(ra), min(ra), max(ra), len(ra)
def show(label, a, b):
    if a not in t or b not in t:
        print(f"  {label:58s} n/a"); return
    m, lo, hi, n = paired(a, b)
    print(f"  {label:58s} {m:.3f} ({lo:.3f}-{hi:.3f} over {n} rounds)")
print(f"\nMedian step seconds (2 threads, {sys.argv[2]} rounds; worker_bench shapes: d=256, 8 layers, T=256, batch 8):")
for k in sorted(t):
    print(f"  {k[0]:5s} {k[1]:18s} {statistics.median(x[0] for x in t[k])*1e3:9.2f} ms")
print("\nTime ratios (A / B: below 1, A is faster), per round then median:")
for c in ["dense,eager,fp32", "dense,eager,bf16", "xmod,auto,fp32", "xmod,auto,bf16", "mm,fp32", "mm,bf16"]:
    show(f"2.6 / 1.13, {c}", ("2.6", c), ("1.13", c))
show("2.6 dense fused bf16 / 1.13 dense eager fp32", ("2.6", "dense,fused,bf16"), ("1.13", "dense,eager,fp32"))
show("2.6 dense auto bf16 / 1.13 dense eager fp32 (target <= 1/1.6)", ("2.6", "dense,auto,bf16"), ("1.13", "dense,eager,fp32"))
show("2.6 dense fused fp32 / 2.6 dense eager fp32", ("2.6", "dense,fused,fp32"), ("2.6", "dense,eager,fp32"))
show("2.6 dense eager bf16 / 2.6 dense eager fp32", ("2.6", "dense,eager,bf16"), ("2.6", "dense,eager,fp32"))
show("1.13 dense eager bf16 / 1.13 dense eager fp32", ("1.13", "dense,eager,bf16"), ("1.13", "dense,eager,fp32"))
for rel in ["1.13", "2.6"]:
    for fam in ["dense", "xmod"]:
        show(f"{rel} {fam} auto fp32, fused CPU kernels / LibTorch ops", (rel, f"{fam},auto,fp32"), (rel, f"{fam},auto,fp32,composite"))
for rel in ["1.13", "2.6"]:
    for prec, path in [("fp32", "eager"), ("bf16", "eager"), ("fp32", "fused"), ("fp32", "auto")]:
        a, b = (rel, f"dense,{path},{prec}"), (rel, f"mm,{prec}")
        if a in t and b in t:
            eff = [ (x[1] / x[0]) / (y[1] / y[0]) for x, y in zip(t[a], t[b]) ]
            print(f"  {rel} dense {path} {prec} step FLOP/s / torch::mm {prec} FLOP/s (target >= 0.8): "
                  f"{statistics.median(eff):.3f} ({min(eff):.3f}-{max(eff):.3f})")
    for prec in ["fp32", "bf16"]:
        a, b = (rel, f"xmod,auto,{prec}"), (rel, f"dense,auto,{prec}")
        if a in t and b in t:
            m, lo, hi, n = paired(a, b)
            flop = t[a][0][1] / t[b][0][1]
            print(f"  {rel} X-MoD (rho 0.125, s 2) / dense {b[1].split(',')[1]} step, {prec}: {m:.3f} ({lo:.3f}-{hi:.3f}); FLOP ratio {flop:.3f} (target: within 0.01)")
show("demo's cheapest job, whole xmod-train run: 2.6 / 1.13", ("2.6", "demo"), ("1.13", "demo"))
PY
