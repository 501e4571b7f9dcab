#!/usr/bin/env python3
"""Runs the shell sessions of docs/tool.md against the real orchmllm-bench and compares outputs.

A session is a fenced block whose lines start with "$ " (a command) followed by the output the
documentation shows for it. Each block runs in a fresh scratch folder, its commands in order
through `sh -c`, with `orchmllm-bench` replaced by the built binary and `mpirun
--oversubscribe -np N` by this build's mpiexec (blocks with mpirun commands skip those commands
when no mpiexec is given; of their output only the tool's lines count, not the launcher's).
stdout and stderr are read as one stream. Every documented output line must match the real one:
  - a JSON object: the same keys in the same order, and the same values except timings (keys
    `seconds` / `*_seconds` other than `predicted_*`, and `*_vs_alltoallv` ratios of timings);
  - any other line: equal once every decimal number (d.ddd) and the blanks before it are
    masked on both sides (table columns of timings, ratios, whatever their width); integers,
    words and messages must match exactly.
Exit status 0 when every documented line matched (a summary line says how many), else 1 with
the first differences.

  docs_check.py --tool PATH --doc docs/tool.md --work-dir DIR
                [--mpiexec PATH --numproc-flag -np [--oversubscribe FLAG]]
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

TIMING_KEY = re.compile(r"(^|_)seconds$|_vs_alltoallv$")
# A decimal with the blanks before it (table columns of varying width, e.g. times).
DECIMAL = re.compile(r"\s*-?\d+\.\d+(e[-+]?\d+)?")
MPIRUN = re.compile(r"^mpirun --oversubscribe -np (\d+) ")


def sessions(doc):
    """Yields (first line number, [(command, [expected lines])]) per fenced block with commands."""
    block, start, inside = [], 0, False
    for number, line in enumerate(open(doc, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if line.startswith("```"):
            if inside and any(l.startswith("$ ") for l in block):
                steps = []
                for l in block:
                    if l.startswith("$ "):
                        steps.append((l[2:], []))
                    elif steps:
                        steps[-1][1].append(l)
                yield start, steps
            inside, block, start = not inside, [], number + 1
        elif inside:
            block.append(line)


def json_diff(want, got):
    try:
        w = json.loads(want)
        g = json.loads(got)
    except json.JSONDecodeError as e:
        return f"not JSON: {e}"
    if list(w) != list(g):
        missing = [k for k in w if k not in g]
        extra = [k for k in g if k not in w]
        return f"keys differ (documented but absent: {missing}; new: {extra}; or order)"
    for k, v in w.items():
        if not TIMING_KEY.search(k) or k.startswith("predicted_"):
            if v != g[k]:
                return f'"{k}": documented {v!r}, got {g[k]!r}'
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--doc", required=True)
    ap.add_argument("--work-dir", required=True)
    ap.add_argument("--mpiexec", default="")
    ap.add_argument("--numproc-flag", default="-np")
    ap.add_argument("--oversubscribe", default="")
    a = ap.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    tool = shlex.quote(os.path.abspath(a.tool))
    checked, skipped, failures = 0, 0, []
    for start, steps in sessions(a.doc):
        work = os.path.join(a.work_dir, f"block_{start}")
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        for command, expected in steps:
            m = MPIRUN.match(command)
            if m:
                if not a.mpiexec:
                    skipped += 1
                    continue
                launcher = " ".join(shlex.quote(x) for x in
                                    [a.mpiexec, a.numproc_flag, m.group(1)] +
                                    ([a.oversubscribe] if a.oversubscribe else []))
                command = launcher + " " + command[m.end():]
            run = re.sub(r"(^|[;|]\s*|\s)orchmllm-bench(?=\s)", lambda x: x.group(1) + tool,
                         command)
            p = subprocess.run(["sh", "-c", run], cwd=work, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=300)
            got = p.stdout.splitlines()
            if m:  # the launcher's own banners (a rank's non-zero exit) are not the tool's
                got = [l for l in got if l.startswith(("{", "orchmllm-bench"))]
            where = f"{a.doc}:{start}: $ {command}"
            if len(got) != len(expected):
                failures.append(f"{where}\n  documented {len(expected)} lines, got {len(got)}:"
                                f"\n  " + "\n  ".join(got[:6]))
                continue
            for want, line in zip(expected, got):
                if want.startswith("{"):
                    problem = json_diff(want, line)
                elif DECIMAL.sub(" #", want) != DECIMAL.sub(" #", line):
                    problem = f"documented: {want}\n  got:        {line}"
                else:
                    problem = None
                if problem:
                    failures.append(f"{where}\n  {problem}")
                    break
                checked += 1
    print(f"docs_check: {checked} documented output lines matched, {len(failures)} commands "
          f"differ, {skipped} MPI commands skipped (no mpiexec)")
    for f in failures[:10]:
        print("DIFF " + f)
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
