"""The fuzz run over the public Python API (fuzz_api.py, its command in docs/python.md,
"Errors"): 10,000 calls with random and boundary values end with only documented exceptions
and results that keep their invariants. Run in a subprocess under a timeout, so a crash or a
hang fails this test instead of the test session. The regression tests of what it found are
beside the API they exercise (test_balance.py, test_step.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

FUZZ = Path(__file__).with_name("fuzz_api.py")


def run_fuzz(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, str(FUZZ), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


def test_fuzz_10000_calls_end_in_documented_exceptions():
    out = run_fuzz("--calls", "10000", "--seed", "1")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-12000:]
    summary = out.stdout.splitlines()[0]
    assert " 0 failures" in summary, out.stdout
    calls = int(summary.split(": ")[1].split()[0])
    assert calls >= 10000, summary
    # Every target ran, and each ended in successes as well as in errors.
    for target in ("balance", "plan_methods", "map_bins", "cost_objects", "fit_quadratic_cost",
                   "CostCalibration", "step"):
        line = next(x for x in out.stdout.splitlines() if x.strip().startswith(target + ":"))
        assert " ok " in line + " ", line


def test_fuzz_replays_one_case():
    out = run_fuzz("--case", "7", "--seed", "3", "--verbose", timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "case 7" in out.stdout and "1 cases" in out.stdout


def test_fuzz_judges_exceptions():
    import orchmllm
    from fuzz_api import DOCUMENTED, UserCostError, clean_error

    assert clean_error(orchmllm.InvalidArgumentError("orchmllm: x [f:1]")) is None
    assert clean_error(orchmllm.InfeasibleError("orchmllm: x [f:1]")) is None
    assert clean_error(TypeError("lengths must hold integers")) is None
    assert clean_error(UserCostError("the user's own")) is None
    # A crash-like or foreign outcome is a failure.
    assert clean_error(MemoryError("std::bad_alloc")) is not None
    assert clean_error(OverflowError("too big")) is not None
    assert clean_error(orchmllm.CommunicationError("orchmllm: x")) is not None
    assert clean_error(orchmllm.Error("orchmllm: x")) is not None
    assert clean_error(ValueError("cannot create std::vector larger than max_size()")) is not None
    assert clean_error(ValueError("")) is not None
    for cls in (orchmllm.InvalidArgumentError, orchmllm.ParseError, orchmllm.InfeasibleError):
        assert issubclass(cls, DOCUMENTED)
