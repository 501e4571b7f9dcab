#!/usr/bin/env python3
"""What `automatic` costs against its own `lpt`, from 256 to 163,840 items (docs/results.md,
"What automatic spends, by size").

Four inputs, each at n items = d ranks x k items per rank:
  lognormal  `orchmllm-bench generate` (LN(7, 1) clipped to [16, 32768]), cost l + 1e-4 l^2;
  vl-sft     the LLM stage of `orchmllm-bench workload --name vl-sft` (k samples per rank: text
             plus image tokens), cost l + 1.3e-5 l^2;
  trace      the LLM stage of `orchmllm-bench workload --trace bench/traces/vl-sft.csv` (the
             shipped length trace), linear cost;
  tiles      InternVL-style vision items: every length a multiple of one 1,025-token tile
             (1 to 13 tiles, uniform, seeded), linear cost: the equal-granularity case.
For every case the rounds run `plan --algorithm lpt`, `plan` (automatic) and, with --baseline,
the baseline binary's `plan`, in rotating order (machine noise hits them alike), and report the
median `plan_seconds` (the balance() call only), the ratio to the lower bound, whether the plan
is proven optimal and which algorithm `automatic` kept. Checks (printed; with --check a failed
one gives exit status 1): automatic is never worse balanced than lpt nor, with --baseline, than
the baseline; tile inputs whose plan reaches the bound are reported proven optimal. Timings are
reported, never checked (the machine's noise is not the code's): rows where lpt is at the bound
and automatic took more than 2x lpt are listed as notes. The ctest bench.auto_sweep runs a
short version (256 and 1,024 items, one round).

Usage (from the repository root):
  bench/report/auto_sweep.py --bench build/default/bench/orchmllm-bench [--baseline OLD_BENCH]
      [--sizes 256,1024,4096,16384,65536,163840] [--per-rank 4,8,16,64]
      [--inputs lognormal,vl-sft,trace,tiles]
      [--rounds 3] [--markdown] [--check] [--work-dir DIR]
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

COSTS = {"lognormal": "quadratic:1,0.0001", "vl-sft": "quadratic:1,0.000013", "trace": "linear",
         "tiles": "linear"}
TRACE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "traces", "vl-sft.csv")
TILE = 1025


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def write_items(bench, kind, d, k, seed, work):
    path = os.path.join(work, f"{kind}_{d}x{k}.csv")
    if kind == "lognormal":
        run_json([bench, "generate", "--ranks", str(d), "--items-per-rank", str(k), "--seed",
                  str(seed), "--out", path])
    elif kind in ("vl-sft", "trace"):
        out_dir = os.path.join(work, f"{kind}_{d}x{k}")
        source = ["--name", "vl-sft"] if kind == "vl-sft" else ["--trace", TRACE]
        run_json([bench, "workload", *source, "--ranks", str(d), "--samples-per-rank", str(k),
                  "--seed", str(seed), "--out-dir", out_dir])
        path = os.path.join(out_dir, "llm.csv")
    else:
        rng = random.Random(seed * 1_000_003 + d * 131 + k)
        with open(path, "w") as f:
            f.write("rank,slot,length\n")
            for r in range(d):
                for s in range(k):
                    f.write(f"{r},{s},{TILE * rng.randint(1, 13)}\n")
    return path


def plan(bench, items, d, cost, algorithm, work):
    cmd = [bench, "plan", "--items", items, "--ranks", str(d), "--cost", cost, "--out",
           os.path.join(work, "plan.csv")]
    if algorithm:
        cmd += ["--algorithm", algorithm]
    return run_json(cmd)


def measure(args, kind, d, k, work):
    items = write_items(args.bench, kind, d, k, args.seed, work)
    runs = {"lpt": (args.bench, "lpt"), "auto": (args.bench, None)}
    if args.baseline:
        runs["base"] = (args.baseline, None)
    names = list(runs)
    seconds = {n: [] for n in names}
    last = {}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            j = plan(runs[n][0], items, d, COSTS[kind], runs[n][1], work)
            seconds[n].append(j["plan_seconds"])
            last[n] = j
    row = {"input": kind, "items": d * k, "ranks": d, "per_rank": k}
    for n in names:
        row[n + "_s"] = statistics.median(seconds[n])
        row[n + "_ratio"] = last[n]["ratio"]
        row[n + "_proven"] = bool(last[n]["proven_optimal"])
    row["auto_used"] = last["auto"]["algorithm"]
    return row


def notes(row):
    lpt_at_bound = row["lpt_proven"] or row["lpt_ratio"] <= 1.0
    if lpt_at_bound and row["auto_s"] > 2 * row["lpt_s"]:
        return [f"lpt at the bound but automatic took {row['auto_s'] / row['lpt_s']:.2f}x lpt"]
    return []


def checks(row, has_base):
    bad = []
    if row["auto_ratio"] > row["lpt_ratio"]:
        bad.append("automatic worse balanced than lpt")
    if has_base and row["auto_ratio"] > row["base_ratio"]:
        bad.append("automatic worse balanced than the baseline")
    if row["input"] == "tiles" and row["auto_ratio"] <= 1.0 and not row["auto_proven"]:
        bad.append("tile plan at the bound not proven optimal")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", required=True)
    ap.add_argument("--baseline")
    ap.add_argument("--sizes", default="256,1024,4096,16384,65536,163840")
    ap.add_argument("--per-rank", default="4,8,16,64")
    ap.add_argument("--inputs", default="lognormal,vl-sft,trace,tiles")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--work-dir")
    args = ap.parse_args()
    work = args.work_dir or tempfile.mkdtemp(prefix="auto_sweep_")
    os.makedirs(work, exist_ok=True)
    rows, failures, remarks = [], [], []
    for kind in args.inputs.split(","):
        for n in map(int, args.sizes.split(",")):
            for k in map(int, args.per_rank.split(",")):
                if n % k or n // k < 2:
                    continue
                row = measure(args, kind, n // k, k, work)
                rows.append(row)
                where = f"{kind} {n} items ({n // k} x {k})"
                failures += [f"{where}: {b}" for b in checks(row, bool(args.baseline))]
                remarks += [f"{where}: {b}" for b in notes(row)]
                if not args.markdown:
                    print(json.dumps(row), flush=True)
    if args.markdown:
        head = ["input", "items", "ranks x per rank", "lpt ms", "lpt ratio", "automatic ms",
                "automatic ratio", "kept", "proven", "auto / lpt"]
        if args.baseline:
            head += ["baseline ms", "baseline ratio", "auto / baseline"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            cells = [r["input"], f"{r['items']:,}", f"{r['ranks']:,} x {r['per_rank']}",
                     f"{r['lpt_s'] * 1e3:.2f}", f"{r['lpt_ratio']:.6f}", f"{r['auto_s'] * 1e3:.2f}",
                     f"{r['auto_ratio']:.6f}", r["auto_used"], "yes" if r["auto_proven"] else "no",
                     f"{r['auto_s'] / r['lpt_s']:.2f}"]
            if args.baseline:
                cells += [f"{r['base_s'] * 1e3:.2f}", f"{r['base_ratio']:.6f}",
                          f"{r['auto_s'] / r['base_s']:.2f}"]
            print("| " + " | ".join(cells) + " |")
    for r in remarks:
        print("note: " + r, file=sys.stderr)
    for f in failures:
        print("check failed: " + f, file=sys.stderr)
    return 1 if (args.check and failures) else 0


if __name__ == "__main__":
    sys.exit(main())
