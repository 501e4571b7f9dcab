#!/usr/bin/env python3
"""Turns the JSON of balancer_bench (--benchmark_out=X.json --benchmark_out_format=json) into the
Markdown tables of docs/results.md.

usage: python3 bench/balance/to_markdown.py results.json > tables.md
"""
import json
import sys
from collections import OrderedDict

GRID = ["BM_sort_heap", "BM_sort_heap_ids", "BM_none", "BM_lpt", "BM_lpt_refine", "BM_kk",
        "BM_auto", "BM_padded"]
RANKS = [8, 64, 512, 2560, 10240]
PER_RANK = [1, 4, 16, 64]


def load(path):
    with open(path) as f:
        data = json.load(f)
    rows = OrderedDict()
    for b in data["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":
            continue
        parts = b["name"].split("/")
        family = parts[0]
        args = tuple(int(p) for p in parts[1:3])
        rows[(family, args)] = b
    return data.get("context", {}), rows


def ms(b):
    unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b.get("time_unit", "ns")]
    return b["cpu_time"] * unit  # CPU time: the shared build machine inflates wall time


def t(x):
    """Milliseconds shown as microseconds: 3 significant digits, no exponent (0.0712, 1.78, 186,
    185942)."""
    us = 1e3 * x
    return f"{us:.3g}" if us < 100 else f"{us:.0f}"


def fmt_rate(x):
    return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.1f}k"


def grid_tables(rows):
    out = []
    for fam in GRID:
        if not any(k[0] == fam for k in rows):
            continue
        out.append(f"### {fam}\n")
        out.append("| d | items/rank | n | time (µs) | items/s | ratio to LB | imbalance | "
                   "proven | used |")
        out.append("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for d in RANKS:
            for k in PER_RANK:
                b = rows.get((fam, (d, k)))
                if b is None:
                    continue
                label = b.get("label", "")
                out.append(
                    f"| {d} | {k} | {d * k} | {t(ms(b))} | {fmt_rate(b['items_per_second'])} | "
                    f"{b.get('ratio', float('nan')):.6f} | {b.get('imbalance', float('nan')):.6f} "
                    f"| {int(b['proven']) if 'proven' in b else ''} | {label} |")
        out.append("")
    return out


def side_by_side(rows):
    out = ["### Time relative to sort+heap (separate rows of the same run)\n",
           "| d | items/rank | sort+heap µs | lpt µs | lpt / sort+heap | auto µs | "
           "auto / sort+heap | auto ratio | kk µs | lpt+refine µs |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for d in RANKS:
        for k in PER_RANK:
            base = rows.get(("BM_sort_heap", (d, k)))
            lpt = rows.get(("BM_lpt", (d, k)))
            aut = rows.get(("BM_auto", (d, k)))
            kk = rows.get(("BM_kk", (d, k)))
            ref = rows.get(("BM_lpt_refine", (d, k)))
            if not (base and lpt and aut and kk and ref):
                continue
            out.append(
                f"| {d} | {k} | {t(ms(base))} | {t(ms(lpt))} | {ms(lpt) / ms(base):.2f} | "
                f"{t(ms(aut))} | {ms(aut) / ms(base):.2f} | {aut['ratio']:.6f} | {t(ms(kk))} | "
                f"{t(ms(ref))} |")
    out.append("")
    return out


def breakdown(rows):
    names = ["BM_facade_costs", "BM_facade_order", "BM_facade_lower_bound", "BM_makespan_lower_bound", "BM_detail_lpt",
             "BM_detail_kk", "BM_facade_check", "BM_facade_plan", "BM_sort_only", "BM_heap_only", "BM_sort_heap",
             "BM_sort_heap_ids", "BM_lpt", "BM_auto"]
    sizes = sorted({k[1] for k in rows if k[0] == "BM_facade_order"})
    if not sizes:
        return []
    out = ["### Façade break-down (µs)\n",
           "| piece | " + " | ".join(f"{d}×{k}" for d, k in sizes) + " |",
           "|---|" + "---:|" * len(sizes)]
    for n in names:
        cells = []
        for s in sizes:
            b = rows.get((n, s))
            cells.append(t(ms(b)) if b else "")
        out.append(f"| {n} | " + " | ".join(cells) + " |")
    out.append("")
    return out


def targets(rows):
    out = []
    t = rows.get(("BM_target_time", (2560, 64)))
    if t:
        out += ["### BM_target_time/2560/64 (interleaved timing)\n",
                "| sort+heap ms | lpt ms | auto ms | lpt / sort+heap | auto / sort+heap | "
                "auto ratio | auto used |",
                "|---:|---:|---:|---:|---:|---:|---|",
                f"| {t['sort_heap_ms']:.3f} | {t['lpt_ms']:.3f} | {t['auto_ms']:.3f} | "
                f"{t['lpt_x']:.3f} | {t['auto_x']:.3f} | {t['auto_ratio']:.7f} | "
                f"{t.get('label', '')} |", ""]
    q = [(d, rows.get(("BM_target_quality", (d, 4)))) for d in RANKS]
    if any(b for _, b in q):
        out += ["### BM_target_quality/d/4 (16 seeds each)\n",
                "| d | worst auto/lpt | worst auto/kk | worst auto ratio | violations |",
                "|---:|---:|---:|---:|---:|"]
        for d, b in q:
            if b:
                out.append(f"| {d} | {b['worst_auto_over_lpt']:.6f} | "
                           f"{b['worst_auto_over_kk']:.6f} | {b['worst_auto_ratio']:.6f} | "
                           f"{int(b['violations'])} |")
        out.append("")
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    _, rows = load(sys.argv[1])
    print("\n".join(targets(rows) + side_by_side(rows) + breakdown(rows) + grid_tables(rows)))


if __name__ == "__main__":
    main()
