#!/usr/bin/env python3
"""Runs real_step.py for several scenarios in interleaved rounds and tabulates them.

Two runs of one scenario on a shared machine differ by a few per cent (the machine's state
drifts between runs), as much as the scenarios' own differences at a few ranks. Rounds
interleave the scenarios (round 1: none, llm, per-stage, orchestrated; round 2: the same; …)
so that drift falls on every scenario alike, and the table reports, per scenario, the median
over the rounds of the run's mean step time, plus in how many batches each scenario beat
per-stage balancing (the per-batch medians over the rounds compared).

Usage (the arguments after ``--`` go to every real_step.py run)::

    real_step_rounds.py --rounds 3 --out DIR --scenarios none,llm,per-stage,orchestrated \
        -- --trace TRACE.csv --ranks 2 --samples-per-rank 8 --steps 32 --seed 0

Writes DIR/<scenario>-<round>.json (real_step.py's reports) and DIR/summary.json; prints one
markdown row per scenario.
"""

import argparse
import json
import os
import subprocess
import sys
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def summarize(reports: Dict[str, List[Dict[str, Any]]]) -> Dict[str, Any]:
    """Per scenario: every round's mean step, their median, and the per-batch medians."""
    out: Dict[str, Any] = {}
    for name, runs in reports.items():
        per_batch = np.median(np.array([r["step_seconds"] for r in runs]), axis=0)
        means = [float(r["step_seconds_mean"]) for r in runs]
        out[name] = {"round_means": means, "mean_of_rounds_median": float(np.median(means)),
                     "per_batch_median": per_batch.tolist(),
                     "predicted_mean": float(np.median([r["predicted_step_seconds_mean"]
                                                        for r in runs])),
                     "alltoall_seconds_median": float(np.median([r["alltoall_seconds_median"]
                                                                 for r in runs])),
                     "max_rel_grad_diff": max(float(r["max_rel_grad_diff"]) for r in runs)}
    if "none" in out:
        base = np.array(out["none"]["per_batch_median"])
        for v in out.values():
            v["speedup"] = out["none"]["mean_of_rounds_median"] / v["mean_of_rounds_median"]
            v["faster_than_none_batches"] = int((np.array(v["per_batch_median"]) < base).sum())
    if "per-stage" in out:
        base = np.array(out["per-stage"]["per_batch_median"])
        for v in out.values():
            v["faster_than_per_stage_batches"] = int(
                (np.array(v["per_batch_median"]) < base).sum())
    return out


def main(argv: Optional[Sequence[str]] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: List[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, rest = argv[:at], argv[at + 1:]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--scenarios", default="none,llm,per-stage,orchestrated")
    p.add_argument("--out", required=True, help="folder for the reports")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    if any(a == "--scenario" or a.startswith("--json") for a in rest):
        p.error("real_step.py's --scenario and --json are set by the rounds")
    scenarios = args.scenarios.split(",")
    os.makedirs(args.out, exist_ok=True)
    reports: Dict[str, List[Dict[str, Any]]] = {s: [] for s in scenarios}
    for k in range(args.rounds):
        for s in scenarios:
            path = os.path.join(args.out, f"{s}-{k}.json")
            subprocess.run([sys.executable, os.path.join(HERE, "real_step.py"), *rest,
                            "--scenario", s, "--json", path], check=True)
            with open(path, encoding="utf-8") as f:
                reports[s].append(json.load(f))
    summary = summarize(reports)
    with open(os.path.join(args.out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump({"arguments": rest, "rounds": args.rounds, "scenarios": summary}, f, indent=1)
    print("| scenario | round means (ms) | median | speed-up | faster than per-stage | "
          "exchanges | predicted |")
    print("|---|---|---|---|---|---|---|")
    for s, v in summary.items():
        means = ", ".join(f"{1e3 * m:.0f}" for m in v["round_means"])
        print(f"| {s} | {means} | {1e3 * v['mean_of_rounds_median']:.0f} | "
              f"{v.get('speedup', float('nan')):.3f} | "
              f"{v.get('faster_than_per_stage_batches', '-')} | "
              f"{1e3 * v['alltoall_seconds_median']:.0f} | {1e3 * v['predicted_mean']:.0f} |")


if __name__ == "__main__":
    main()
