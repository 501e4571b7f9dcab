"""The short version of python/benchmarks/real_step.py (ctest python.real_step_short): every
scenario on 2 gloo ranks, 4 samples per rank, 3 warm-up and 2 measured steps of the shipped
trace, a real Qwen2-VL model (transformers, random-initialised). Fails unless every report has
its fields, the loss and gradients equal the unbalanced run's (float32: <= 1e-5 relative), the
balanced stages' planned imbalance does not grow, and the simulator's prediction names the
scenario's all-to-alls (none 0, llm 3, per-stage 6, orchestrated 4); the orchestrated run is
also paired with per-stage (``--paired``), whose report must hold a time per measured step.
Times are reported, never asserted (docs/results.md has the measured figures).

    python real_step_short.py OUT_DIR
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
BENCH = HERE.parent / "benchmarks"
ALLTOALLS = {"none": 0, "llm": 3, "per-stage": 6, "orchestrated": 4}
KEYS = ["step_seconds", "step_seconds_median", "step_seconds_p10", "step_seconds_p90", "stages",
        "alltoall_seconds_median", "planning_seconds_median", "grad_sync_seconds_median",
        "max_rel_grad_diff", "cost_calibration", "comm_model", "predicted_step_seconds",
        "prediction_error", "prediction", "model", "per_step"]


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    failures = []
    for scenario, count in ALLTOALLS.items():
        path = out / f"{scenario}.json"
        cmd = [sys.executable, str(BENCH / "real_step.py"), "--trace",
               str(BENCH / "traces" / "vl-sft-cpu.csv"), "--ranks", "2", "--samples-per-rank",
               "4", "--steps", "2", "--warmup", "3", "--seed", "3", "--scenario", scenario,
               "--json", str(path)]
        if scenario == "orchestrated":
            cmd += ["--paired", "per-stage"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        print(done.stdout.strip())
        if done.returncode != 0:
            failures.append(f"{scenario}: exit {done.returncode}: {done.stderr[-2000:]}")
            continue
        r = json.loads(path.read_text())
        missing = [k for k in KEYS if k not in r]
        if missing:
            failures.append(f"{scenario}: report lacks {missing}")
            continue
        if not (r["max_rel_grad_diff"] <= 1e-5):
            failures.append(f"{scenario}: loss/gradients differ by {r['max_rel_grad_diff']:.2e}")
        if len(r["step_seconds"]) != 2 or min(r["step_seconds"]) <= 0:
            failures.append(f"{scenario}: step times {r['step_seconds']}")
        for name, stage in r["stages"].items():
            if len(stage["compute_seconds_per_rank_median"]) != 2:
                failures.append(f"{scenario}: {name} has no per-rank times")
            if "imbalance_after_median" in stage and not (
                    stage["imbalance_after_median"] <= stage["imbalance_before_median"] + 1e-12):
                failures.append(f"{scenario}: {name} imbalance grew: {stage}")
        balanced = {"none": set(), "llm": {"llm"}, "per-stage": {"vision", "llm"},
                    "orchestrated": {"vision", "llm"}}[scenario]
        planned = {n for n, s in r["stages"].items() if "imbalance_after_median" in s}
        if planned != balanced:
            failures.append(f"{scenario}: planned stages {planned}, expected {balanced}")
        steps = r["prediction"]["per_step"]
        if [s["alltoalls"] for s in steps] != [count] * 2:
            failures.append(f"{scenario}: the simulator counts {[s['alltoalls'] for s in steps]}"
                            f" all-to-alls, expected {count}")
        if not r["predicted_step_seconds"] > 0:
            failures.append(f"{scenario}: prediction {r['predicted_step_seconds']}")
        paired = r["paired"]
        if scenario == "orchestrated" and not (
                paired and paired["scenario"] == "per-stage" and len(paired["step_seconds"]) == 2
                and min(paired["step_seconds"]) > 0
                and paired["difference_seconds_ci95"][0] <= paired["difference_seconds_mean"]
                <= paired["difference_seconds_ci95"][1]):
            failures.append(f"{scenario}: paired report {paired}")
        if scenario != "orchestrated" and paired is not None:
            failures.append(f"{scenario}: a paired report without --paired")
    # A malformed trace is refused before any rank starts: exit 2, the line named.
    bad = out / "bad.csv"
    bad.write_text("sample,image_tokens,text_tokens\n0,6,1\n")
    done = subprocess.run([sys.executable, str(BENCH / "real_step.py"), "--trace", str(bad),
                           "--scenario", "none", "--json", str(out / "bad.json")],
                          capture_output=True, text=True)
    if done.returncode != 2 or "bad.csv:2: image patch counts" not in done.stderr:
        failures.append(f"malformed trace: exit {done.returncode}, stderr {done.stderr!r}")
    if failures:
        print("\n".join(failures), file=sys.stderr)
        sys.exit(1)
    print("OK")


if __name__ == "__main__":
    main()
