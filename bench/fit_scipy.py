#!/usr/bin/env python3
"""The dense-law fit of bench/fit_bench.cc done the usual Python way, for a
side-by-side time: SciPy's L-BFGS-B from every start of Epoch AI's 5,400-point
grid, Huber (delta 1e-3) on log-loss residuals in the log-sum-exp form, summed,
with an analytic gradient (numpy, vectorised over the points).

Usage: fit_scipy.py CHINCHILLA_CSV  -> one JSON line on stdout.
"""
import csv
import itertools
import json
import sys
import time

import numpy as np
from scipy.optimize import minimize
from scipy.special import logsumexp


def load(path):
    rows = list(csv.DictReader(open(path)))
    n = np.array([float(r["Model Size"]) for r in rows])
    c = np.array([float(r["Training FLOP"]) for r in rows])
    loss = np.array([float(r["loss"]) for r in rows])
    keep = np.argsort(loss)[:-5]  # drop the 5 highest-loss runs
    n, c, loss = n[keep], c[keep], loss[keep]
    return np.log(n), np.log(c / (6 * n)), np.log(loss)


def main():
    log_n, log_d, log_l = load(sys.argv[1])
    delta = 1e-3

    def objective(p):
        a, b, e, alpha, beta = p
        terms = np.stack([a - alpha * log_n, b - beta * log_d, np.full_like(log_n, e)])
        pred = logsumexp(terms, axis=0)
        r = pred - log_l
        small = np.abs(r) <= delta
        f = np.where(small, 0.5 * r * r, delta * (np.abs(r) - 0.5 * delta)).sum()
        dr = np.where(small, r, delta * np.sign(r))
        w = np.exp(terms - pred)  # softmax weights, d pred / d term
        grad = np.array([
            (dr * w[0]).sum(), (dr * w[1]).sum(), (dr * w[2]).sum(),
            -(dr * w[0] * log_n).sum(), -(dr * w[1] * log_d).sum()])
        return f, grad

    grid = itertools.product([0, 5, 10, 15, 20, 25], [0, 5, 10, 15, 20, 25],
                             [-1, -0.5, 0, 0.5, 1, 1.5], [0, 0.5, 1, 1.5, 2], [0, 0.5, 1, 1.5, 2])
    start = time.perf_counter()
    best = None
    starts = 0
    bounds = [(None, None)] * 3 + [(0, 10), (0, 10)]
    for x0 in grid:
        starts += 1
        res = minimize(objective, np.array(x0, dtype=float), jac=True, method="L-BFGS-B",
                       bounds=bounds)
        if np.isfinite(res.fun) and (best is None or res.fun < best.fun):
            best = res
    seconds = time.perf_counter() - start
    a, b, e, alpha, beta = best.x
    print(json.dumps({"objective": float(best.fun), "E": float(np.exp(e)), "A": float(np.exp(a)),
                      "B": float(np.exp(b)), "alpha": float(alpha), "beta": float(beta),
                      "starts": starts, "seconds": seconds}))


if __name__ == "__main__":
    main()
