#!/usr/bin/env python3
"""Compile time and peak memory of typical translation units, header-only vs compiled mode.

Each unit is compiled (-c, no link) with the same flags as a baseline unit that holds only
<vector> <string> <algorithm> <cstdio> <functional>; rounds interleave the units so machine noise
hits them alike, and the table reports the median seconds, the ratio to the baseline's median and
the peak resident memory of the compiler. "compiled" adds -DORCHMLLM_COMPILED=1, which is what
linking orchmllm::compiled does (the heavy templates then come from the library).

Usage: bench/report/compile_time.py [--cxx g++] [--flags "-O2"] [--rounds 5] [--markdown]
                                   [--modes header-only,compiled]
Run from the repository root. Units: the README example, one `balance` call (runtime selector),
one `balance` naming its balancer type (lpt), one `plan_step`
call, the training-step example (examples/training_step.cpp; the tables of docs/results.md
measured the demo that examples/ held before it became `orchmllm-bench demo`).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

BASELINE = """#include <vector>
#include <string>
#include <algorithm>
#include <cstdio>
#include <functional>
int main() { std::vector<std::string> v{"a"}; std::printf("%zu\\n", v.size()); }
"""

ONE_BALANCE = """#include <orchmllm/balance/balancer.hpp>
#include <cstdio>
int main() {
  const auto layout = orchmllm::batch_layout::from_ranks({{900, 20, 30}, {10}, {}, {700}});
  const auto r = orchmllm::balance(layout, orchmllm::quadratic_cost{0.0, 1.0, 1.0 / 512});
  std::printf("%f\\n", r.makespan);
}
"""

ONE_TYPED_BALANCE = """#include <orchmllm/balance/balancer.hpp>
#include <cstdio>
int main() {
  const auto layout = orchmllm::batch_layout::from_ranks({{900, 20, 30}, {10}, {}, {700}});
  const auto r = orchmllm::balance(layout, orchmllm::quadratic_cost{0.0, 1.0, 1.0 / 512},
                                   orchmllm::packed, orchmllm::balancers::lpt{.refine = true});
  std::printf("%f\\n", r.makespan);
}
"""

ONE_PLAN_STEP = """#include <orchmllm/orchestrator/orchestrator.hpp>
#include <cstdio>
int main() {
  orchmllm::stage_declarations decl;
  decl.encoders.push_back({.name = "vision", .cost = orchmllm::quadratic_cost{0.0, 1.0, 1e-3}});
  decl.llm.cost = orchmllm::quadratic_cost{0.0, 1.0, 1e-4};
  std::vector<orchmllm::local_batch> batches(4);
  for (auto& b : batches) {
    b.text_tokens = {100, 300};
    b.sub_items.push_back({.modality = 0, .parent = 0, .encoder_length = 256, .input_rows = 256,
                           .llm_tokens = 64});
  }
  const auto meta = orchmllm::make_step_metadata(batches, 1);
  const auto plan = orchmllm::plan_step(decl, meta, orchmllm::topology::uniform(4, 2));
  std::printf("%d\\n", plan.alltoalls_per_step());
}
"""


def readme_example(root):
    text = open(os.path.join(root, "README.md"), encoding="utf-8").read()
    m = re.search(r"<!-- example:begin -->.*?```cpp\n(.*?)\n```", text, re.S)
    if not m:
        sys.exit("compile_time.py: no README example found")
    return m.group(1) + "\n"


def compile_once(cxx, flags, includes, source):
    """Seconds and peak RSS (MiB) of one compile."""
    cmd = [cxx, "-std=c++20", *flags, *[f"-I{i}" for i in includes], "-c", source, "-o",
           os.devnull]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if status != 0:
        sys.exit(f"compile_time.py: failed: {' '.join(cmd)}")
    return seconds, usage.ru_maxrss / 1024.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cxx", default="g++")
    ap.add_argument("--flags", default="-O2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--modes", default="header-only,compiled",
                    help="comma-separated: header-only, compiled (a tree without the compiled "
                         "mode, e.g. an older checkout, measures header-only only)")
    args = ap.parse_args()
    root = os.getcwd()
    includes = [os.path.join(root, "include"), os.path.join(root, "bench")]
    flags = args.flags.split()
    work = tempfile.mkdtemp(prefix="orchmllm_compile_time_")
    units = {}
    for name, text in [("baseline", BASELINE), ("README example", readme_example(root)),
                       ("one balance", ONE_BALANCE), ("one typed balance", ONE_TYPED_BALANCE),
                       ("one plan_step", ONE_PLAN_STEP)]:
        path = os.path.join(work, re.sub(r"\W+", "_", name) + ".cpp")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        units[name] = path
    units["step example"] = os.path.join(root, "examples", "training_step.cpp")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    runs = [("baseline", [])]
    for name in units:
        if name == "baseline":
            continue
        if "header-only" in modes:
            runs.append((name + " | header-only", []))
        if "compiled" in modes:
            runs.append((name + " | compiled", ["-DORCHMLLM_COMPILED=1"]))
    times = {r[0]: [] for r in runs}
    mem = {r[0]: 0.0 for r in runs}
    for _ in range(args.rounds):
        for label, extra in runs:
            s, m = compile_once(args.cxx, flags + extra, includes, units[label.split(" | ")[0]])
            times[label].append(s)
            mem[label] = max(mem[label], m)
    base = statistics.median(times["baseline"])
    rows = []
    for label, _ in runs:
        med = statistics.median(times[label])
        rows.append((label, med, med / base, mem[label]))
    if args.markdown:
        print(f"| unit | mode | seconds (median of {args.rounds}) | ratio to baseline | peak MiB |")
        print("|---|---|---|---|---|")
        for label, med, ratio, mib in rows:
            unit, _, mode = label.partition(" | ")
            print(f"| {unit} | {mode or '-'} | {med:.2f} | {ratio:.2f} | {mib:.0f} |")
    else:
        for label, med, ratio, mib in rows:
            print(f"{label:40s} {med:7.2f} s  x{ratio:5.2f}  {mib:6.0f} MiB")


if __name__ == "__main__":
    main()
