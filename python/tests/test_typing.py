"""The package type-checks with its stubs (py.typed, the generated _orchmllm.pyi): mypy --strict
accepts a program using the API and orchmllm.torch (and the package, which it follows into), and rejects a wrong use (so the stubs are
really read, not Any)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orchmllm

USE = '''
import numpy as np
import orchmllm

offsets = np.array([0, 2, 3])
lengths = np.array([5, 6, 7])
plan: orchmllm.Plan = orchmllm.balance(offsets, lengths, cost="quadratic:1,1.3e-5",
                                       policy="padded", algorithm="auto", pad_multiple=8,
                                       bytes=lengths, cap=None, min_items=1)
plan = orchmllm.balance(offsets, lengths, orchmllm.QuadraticCost(0.0, 1.0, 0.5))
plan = orchmllm.balance(offsets, lengths, lambda ls: ls * 1.0)
ranks: np.ndarray = plan.dst_rank
makespan: float = plan.makespan + plan.lower_bound
name: str = plan.algorithm
a: orchmllm.AllToAll = plan.all_to_all(0, rows=np.ones(3, np.int64))
splits: list[int] = a.send_splits.tolist()
stats: dict[str, object] = plan.statistics()
try:
    orchmllm.balance(offsets, lengths, cap=1)
except orchmllm.InfeasibleError as e:
    message: str = str(e)

import torch
import orchmllm.torch as otorch
d: otorch.Dispatcher = otorch.Dispatcher(plan, 0, np.ones(3, np.int64), group=None)
y: torch.Tensor = d.dispatch(torch.zeros(d.input_rows, 2))
z: torch.Tensor = otorch.combine(y, plan, 0) + otorch.dispatch(y, plan, 0)
gathered: tuple[np.ndarray, np.ndarray] = otorch.gather_lengths([1, 2])
count: int = d.output_rows + int(d.output_items.sum()) + sum(d.send_splits)
'''
WRONG = "import orchmllm\norchmllm.balance([0, 1], [1]).makespan.upper()\n"


def mypy(tmp_path: Path, name: str, code: str) -> subprocess.CompletedProcess[str]:
    source = tmp_path / name
    source.write_text(code)
    package_root = Path(orchmllm.__file__).resolve().parents[1]
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir",
         str(tmp_path / "cache"), str(source)],
        capture_output=True, text=True, env={"MYPYPATH": str(package_root), "PATH": ""},
        cwd=tmp_path, check=False)


def test_mypy_strict_accepts_the_package_and_its_use(tmp_path):
    out = mypy(tmp_path, "use.py", USE)
    assert "No module named mypy" not in out.stderr, "mypy missing: run bash .ci/install-deps"
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_rejects_a_wrong_use(tmp_path):
    out = mypy(tmp_path, "wrong.py", WRONG)
    assert '"float" has no attribute "upper"' in out.stdout, out.stdout + out.stderr
