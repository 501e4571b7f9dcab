#!/usr/bin/env python3
"""Runs the simulation grid of docs/results.md and draws its plots.

Grid: workloads x DP sizes x scenarios at 8 GPUs per node, one `orchmllm-bench simulate` call
each (every figure SIMULATED except plan_seconds, measured on the machine that runs this
script; see bench/support/simulator.hpp for the model). Writes

  docs/results/simulation.jsonl          one JSON object per run (the tool's output)
  docs/results/imbalance.png             per-stage imbalance per scenario (at --focus-ranks)
  docs/results/mfu.png                   simulated MFU against DP size
  docs/results/speedup.png               speed-up over `none` against DP size
  docs/results/overhead.png              overhead fraction of the step against DP size
  docs/results/inter_node_bytes.png      inter-node bytes per scenario against DP size
  docs/results/planner_time.png          measured planner time against DP size (log-log)

  docs/results/simulation.md             the full tables (per workload: step time, speed-up,
                                         MFU, overhead, inter-node bytes, planner time,
                                         imbalance per stage, every scenario and D)

and replaces the part of docs/results.md between <!-- simulation:begin --> and
<!-- simulation:end --> with the summary: per workload and D, the speed-up of `full` over
`none`, its MFU and its measured planner time.

Usage (from the repository root, after building the tool):
  cmake --preset default && cmake --build --preset default --target orchmllm-bench
  python3 -m pip install matplotlib      # the only dependency, for the plots
  python3 bench/report/simulation_grid.py [--tool build/default/bench/orchmllm-bench]
      [--ranks 128,512,2560,10240,40960,102400] [--workloads vl-sft,...] [--model 7b] [--no-plots]
      [--from-jsonl docs/results/simulation.jsonl --run-date "2026-12-05 23:44 UTC"]
                                                     (redraw without rerunning)
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

# The order of `all_scenarios` in bench/support/simulator.hpp, without cells (the FSDP scenario,
# which needs --micro-batch-tokens: results.md runs it on its own).
SCENARIOS = ["none", "llm-only", "per-stage", "full", "beyond", "split"]
WORKLOADS = ["vl-sft", "omni-pretrain", "video-heavy", "audio-asr"]
STAGES = ["vision", "audio", "llm"]
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def run_grid(args):
    rows = []
    for w in args.workloads:
        for d in args.ranks:
            for s in SCENARIOS:
                cmd = [args.tool, "simulate", "--workload", w, "--ranks", str(d),
                       "--gpus-per-node", str(args.gpus_per_node), "--scenario", s,
                       "--model", args.model, "--seed", str(args.seed)]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                row = json.loads(out.strip().splitlines()[-1])
                rows.append(row)
                print(f"{w:14s} D={d:6d} {s:10s} step {row['step_seconds']:.4f} s "
                      f"mfu {row['mfu']:.3f} overhead {100 * row['overhead_fraction']:.3f} % "
                      f"plan {1e3 * row['plan_seconds']:.1f} ms", file=sys.stderr, flush=True)
    return rows


def index(rows):
    return {(r["workload"], r["ranks"], r["scenario"]): r for r in rows}


def stage(row, name):
    for st in row["stages"]:
        if st["name"] == name:
            return st
    return None


def fmt_bytes(b):
    for unit, div in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= div:
            return f"{b / div:.3g} {unit}"
    return f"{b:.0f} B"


def tables(rows, args):
    ix = index(rows)
    lines = []
    for w in args.workloads:
        lines.append(f"#### `{w}`\n")
        lines.append("| D | scenario | step (s) | speed-up | MFU | overhead | inter-node | planner | "
                     "a2a | imbalance vision / audio / llm |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|")
        for d in args.ranks:
            base = ix.get((w, d, "none"))
            for s in SCENARIOS:
                r = ix.get((w, d, s))
                if r is None:
                    continue
                speed = base["step_seconds"] / r["step_seconds"] if base else float("nan")
                imb = []
                for name in STAGES:
                    st = stage(r, name)
                    imb.append("—" if st is None or st["seconds"] == 0 else f"{st['imbalance']:.3f}")
                lines.append(
                    f"| {d:,} | {s} | {r['step_seconds']:.3f} | {speed:.2f}× | "
                    f"{100 * r['mfu']:.1f} % | {100 * r['overhead_fraction']:.2f} % | "
                    f"{fmt_bytes(r['inter_node_bytes'])} | {1e3 * r['plan_seconds']:.0f} ms | "
                    f"{r['alltoalls']} | {' / '.join(imb)} |")
        lines.append("")
    return "\n".join(lines)


def summary(rows, args):
    """One row per workload: `full`'s speed-up over `none`, MFU and planner time per D."""
    ix = index(rows)
    head = "| workload | " + " | ".join(f"D = {d:,}" for d in args.ranks) + " |"
    lines = ["`full` over `none`: speed-up of the step, MFU, measured planner time.", "",
             head, "|---|" + "---|" * len(args.ranks)]
    for w in args.workloads:
        cells = []
        for d in args.ranks:
            base, r = ix.get((w, d, "none")), ix.get((w, d, "full"))
            if base is None or r is None:
                cells.append("—")
                continue
            cells.append(f"{base['step_seconds'] / r['step_seconds']:.2f}×, "
                         f"{100 * r['mfu']:.0f} %, {1e3 * r['plan_seconds']:.0f} ms")
        lines.append(f"| `{w}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plots(rows, args, outdir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ix = index(rows)
    colors = {"none": "#7f7f7f", "llm-only": "#ff7f0e", "per-stage": "#2ca02c",
              "full": "#1f77b4", "beyond": "#d62728", "split": "#9467bd"}
    ws = args.workloads
    n = len(ws)
    note = "SIMULATED (bench/support/simulator.hpp); planner time measured"

    def grid(title):
        fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.6), squeeze=False)
        fig.suptitle(f"{title} — {note}", fontsize=9)
        return fig, axes[0]

    # Per-stage imbalance at the focus size.
    fig, axes = grid(f"Per-stage imbalance (max/mean stage time) at D = {args.focus_ranks}")
    width = 0.8 / len(SCENARIOS)
    for ax, w in zip(axes, ws):
        for k, s in enumerate(SCENARIOS):
            r = ix.get((w, args.focus_ranks, s))
            if r is None:
                continue
            vals = []
            for name in STAGES:
                st = stage(r, name)
                vals.append(st["imbalance"] if st and st["seconds"] > 0 else 0)
            ax.bar([i + (k - (len(SCENARIOS) - 1) / 2) * width for i in range(len(STAGES))], vals, width,
                   color=colors[s], label=s)
        ax.set_xticks(range(len(STAGES)), STAGES)
        ax.axhline(1.0, color="black", lw=0.5)
        ax.set_title(w, fontsize=10)
    axes[0].set_ylabel("imbalance")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "imbalance.png"), dpi=110)
    plt.close(fig)

    def lines_plot(fname, title, ylabel, value, logy=False, logx=True, hlines=()):
        fig, axes = grid(title)
        for ax, w in zip(axes, ws):
            for s in SCENARIOS:
                xs, ys = [], []
                for d in args.ranks:
                    r = ix.get((w, d, s))
                    if r is not None:
                        v = value(r, ix.get((w, d, "none")))
                        if v is not None:
                            xs.append(d)
                            ys.append(v)
                if xs:
                    ax.plot(xs, ys, marker="o", color=colors[s], label=s)
            if logx:
                ax.set_xscale("log")
            if logy:
                ax.set_yscale("log")
            for y, lab in hlines:
                ax.axhline(y, color="black", lw=0.6, ls="--")
                ax.text(args.ranks[0], y, lab, fontsize=7, va="bottom")
            ax.set_xlabel("DP ranks (GPUs)")
            ax.set_title(w, fontsize=10)
        axes[0].set_ylabel(ylabel)
        axes[-1].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, fname), dpi=110)
        plt.close(fig)

    lines_plot("mfu.png", "Simulated MFU", "MFU (%)", lambda r, b: 100 * r["mfu"])
    lines_plot("speedup.png", "Speed-up over `none`", "speed-up (×)",
               lambda r, b: b["step_seconds"] / r["step_seconds"] if b else None)
    lines_plot("overhead.png", "Overhead: unoverlapped planning + rearrangement communication",
               "fraction of step time (%)",
               lambda r, b: 100 * r["overhead_fraction"] if r["scenario"] != "none" else None,
               logy=True, hlines=((1.0, "1 % target"), (2.0, "2 % (published)")))
    lines_plot("inter_node_bytes.png", "Inter-node bytes per step", "bytes",
               lambda r, b: r["inter_node_bytes"] if r["inter_node_bytes"] > 0 else None,
               logy=True)
    lines_plot("planner_time.png", "Planner time (measured; encoder stages on their own threads)", "seconds",
               lambda r, b: r["plan_seconds"] if r["scenario"] != "none" else None, logy=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tool", default=os.path.join(ROOT, "build/default/bench/orchmllm-bench"))
    p.add_argument("--ranks", default="128,512,2560,10240,40960,102400")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--model", default="7b")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--focus-ranks", type=int, default=2560)
    p.add_argument("--out", default=os.path.join(ROOT, "docs/results"))
    p.add_argument("--results-md", default=os.path.join(ROOT, "docs/results.md"))
    p.add_argument("--from-jsonl", default=None)
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--run-date", default=None,
                   help="the date the rows were measured (with --from-jsonl: the grid run's)")
    args = p.parse_args()
    args.ranks = [int(x) for x in args.ranks.split(",")]
    args.workloads = args.workloads.split(",")
    os.makedirs(args.out, exist_ok=True)

    if args.from_jsonl:
        with open(args.from_jsonl) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    else:
        rows = run_grid(args)
        with open(os.path.join(args.out, "simulation.jsonl"), "w") as f:
            for r in rows:
                f.write(json.dumps(r, sort_keys=True) + "\n")
    if not args.no_plots:
        plots(rows, args, args.out)

    stamp = args.run_date or datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC")
    head = (f"Generated by `python3 bench/report/simulation_grid.py` on {stamp} "
            f"({platform.node() or 'this machine'}, {os.cpu_count()} CPUs; planner time is "
            f"measured there, encoder stages planned on their own threads). Model `{args.model}`, {args.gpus_per_node} GPUs per node, "
            f"seed {args.seed}, 8 samples per rank. All figures but the planner time are "
            f"SIMULATED.\n\n")
    with open(os.path.join(args.out, "simulation.md"), "w") as f:
        f.write("# Simulated training steps: every scenario and size (SIMULATED)\n\n" + head +
                "Written by `bench/report/simulation_grid.py`; the summary and the method are in "
                "[../results.md](../results.md#simulated-training-steps-from-128-to-102400-gpus-simulated).\n\n" +
                tables(rows, args))
    body = head + summary(rows, args) + ("\nEvery scenario and size: "
                                         "[results/simulation.md](results/simulation.md).\n")
    with open(args.results_md) as f:
        text = f.read()
    begin, end = "<!-- simulation:begin -->", "<!-- simulation:end -->"
    if begin in text and end in text:
        a = text.index(begin) + len(begin)
        b = text.index(end)
        text = text[:a] + "\n" + body + "\n" + text[b:]
        with open(args.results_md, "w") as f:
            f.write(text)
    else:
        print(body)


if __name__ == "__main__":
    main()
