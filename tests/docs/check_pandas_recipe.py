#!/usr/bin/env python3
"""Runs the pandas recipe of docs/results.md against a real sweep.

Usage: check_pandas_recipe.py SOURCE_DIR XMOD_BIN

Trains sweeps/smoke.yaml with `xmod run` into a temporary folder, takes the
python block of docs/results.md's pandas section, points it at that database
and sweep, runs it, and checks what it built against xmod's own output:
the same jobs as `xmod results`, the configuration's lr, per-configuration
means equal to `xmod results --by-config`, curves for every job, and dates.
Exit 0 when all hold; 1 with the reason otherwise.
"""
import json
import math
import re
import subprocess
import sys
import tempfile


def fail(message):
    print(f"check_pandas_recipe: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    source, xmod = sys.argv[1], sys.argv[2]
    text = open(f"{source}/docs/results.md", encoding="utf-8").read()
    section = text.split("## pandas", 1)
    if len(section) != 2:
        fail("docs/results.md has no '## pandas' section")
    blocks = re.findall(r"```python\n(.*?)```", section[1], re.S)
    if len(blocks) != 1:
        fail(f"expected one python block in the pandas section, found {len(blocks)}")
    recipe = blocks[0]
    with tempfile.TemporaryDirectory() as tmp:
        db = f"{tmp}/x.db"
        run = subprocess.run([xmod, "run", f"{source}/sweeps/smoke.yaml", "--db", db,
                              "--run-dir", f"{tmp}/runs"], capture_output=True, text=True)
        if run.returncode != 0:
            fail(f"xmod run failed ({run.returncode}): {run.stderr[-2000:]}")
        for line, value in (('db = "demo.db"', db), ('sweep = "demo"', "smoke")):
            if line not in recipe:
                fail(f"the recipe no longer has the line {line!r} this check replaces")
            recipe = recipe.replace(line, f"{line.split(' =')[0]} = {value!r}", 1)
        scope = {}
        exec(compile(recipe, "docs/results.md (pandas recipe)", "exec"), scope)

        def xmod_json(*args):
            out = subprocess.run([xmod, *args, "--db", db, "--format", "json"],
                                 capture_output=True, text=True, check=True).stdout
            return json.loads(out)

        rows = xmod_json("results", "smoke")
        results = scope["results"]
        if sorted(results.job_id) != sorted(r["job_id"] for r in rows):
            fail("the recipe's results hold other jobs than xmod results")
        if len(results) != 8:
            fail(f"the smoke sweep has 8 jobs, the recipe read {len(results)}")
        if "cfg.lr" not in results.columns or not (results["cfg.lr"] == 3.0e-3).all():
            fail("cfg.lr is missing or is not the sweep's 3.0e-3")
        by_config = scope["by_config"]
        expected = xmod_json("results", "smoke", "--by-config")
        if len(by_config) != len(expected):
            fail(f"{len(by_config)} configurations, xmod --by-config has {len(expected)}")
        for e in expected:
            match = by_config[(by_config.family == e["family"]) & (by_config.scale == e["scale"]) &
                              (by_config.sparsity == e["sparsity"]) &
                              (by_config.stride == e["stride"]) &
                              (by_config.context == e["context"])]
            if len(match) != 1 or not math.isclose(match["mean"].iloc[0], e["mean_loss"],
                                                   rel_tol=1e-9):
                fail(f"configuration {e['family']}/{e['scale']}/{e['sparsity']}: recipe "
                     f"{list(match['mean'])}, xmod {e['mean_loss']}")
        curves = scope["curves"]
        if set(curves.job_id) != set(results.job_id) or curves.val_loss.notna().sum() == 0:
            fail("the curves do not cover every job with validation losses")
        sweeps = scope["sweeps"]
        if str(sweeps.created_at.dtype) != "datetime64[ns, UTC]":
            fail(f"created_at is {sweeps.created_at.dtype}, not a UTC date")
        if not (sweeps.created_at.dt.year >= 2024).all():
            fail(f"created_at reads as {list(sweeps.created_at)}")
    print(f"check_pandas_recipe: the recipe read {len(results)} jobs, {len(by_config)} "
          f"configurations and {len(curves)} curve rows, as xmod reports them")


if __name__ == "__main__":
    main()
