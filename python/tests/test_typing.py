"""The package type-checks with its stubs (py.typed, the generated _orchmllm.pyi): mypy --strict
accepts a program using the API and orchmllm.torch (and the package, which it follows into),
and rejects a wrong use (so the stubs are really read, not Any). Runs against the package the
tests import: the build tree's (PYTHONPATH=<build>/python), a `pip install --target` directory
or an installed one (in site-packages)."""

from __future__ import annotations

import re
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import orchmllm

USE = '''
import numpy as np
import orchmllm

offsets = np.array([0, 2, 3])
lengths = np.array([5, 6, 7])
plan: orchmllm.Plan = orchmllm.balance(offsets, lengths, cost="quadratic:1,1.3e-5",
                                       policy="padded", algorithm="automatic", pad_multiple=8,
                                       bytes=lengths, cap=None, min_items=1)
plan = orchmllm.balance(offsets, lengths, orchmllm.QuadraticCost(0.0, 1.0, 0.5))
plan = orchmllm.balance(offsets, lengths, lambda ls: ls * 1.0)
ranks: np.ndarray = plan.dst_rank
makespan: float = plan.makespan + plan.lower_bound
name: str = plan.algorithm
a: orchmllm.AllToAll = plan.all_to_all(0, rows=np.ones(3, np.int64))
splits: list[int] = a.send_splits.tolist()
stats: dict[str, object] = plan.statistics()
version: str = orchmllm.__version__
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

mapped: orchmllm.Plan = orchmllm.map_bins(plan, 2, "transport")
figures: dict[str, object] | None = mapped.mapping
decl = orchmllm.StageDeclarations(
    [orchmllm.EncoderStage("vision", "quadratic:1,1e-3", split=orchmllm.SplitOptions())],
    orchmllm.LLMStage(cost=orchmllm.QuadraticCost(0.0, 1.0, 1e-4), text_row_bytes=8))
meta: orchmllm.StepMetadata = orchmllm.make_step_metadata(
    [orchmllm.LocalBatch([3], [0], [0], [4], [4], [2], [2])], decl.num_encoders)
step: orchmllm.StepPlan = orchmllm.plan_step(decl, meta, 0, rank=0)
route: orchmllm.AllToAll = step.all_to_all("encoder_output", 0, 0)
view: orchmllm.LLMView = step.llm_view(0)
rows_k: list[np.ndarray] = view.row_offsets
units: np.ndarray = step.encoder_view(0, 0).input_rows
reports: list[dict[str, object]] = step.stages()
pe: orchmllm.Rearrangement = step.encoder_plan(0, "output")
sd: otorch.StepDispatchers = otorch.plan_step_dispatchers(decl, orchmllm.LocalBatch([3]))
gathered_meta: orchmllm.StepMetadata = otorch.gather_step_metadata(orchmllm.LocalBatch([3]), decl)
out: torch.Tensor = sd.encoder_outputs[0].dispatch(sd.encoder_inputs[0].dispatch(y))
d2: otorch.Dispatcher = otorch.Dispatcher(route, 0)
with otorch.AsyncStepPlanner(decl, max_pending=2) as planner:
    planned: orchmllm.StepPlan = planner.submit(orchmllm.LocalBatch([3])).result()
    taken: otorch.StepDispatchers = planner.next()

from orchmllm.compat import verl as cverl
parts: list[list[int]] = cverl.get_seqlen_balanced_partitions([3, 1, 2, 2], 2, equal_size=True)
micro, order = cverl.rearrange_micro_batches({"attention_mask": torch.ones(4, 3)}, 6)
metrics: dict[str, float] = cverl.log_seqlen_unbalance([3, 1, 2, 2], parts, "dp")

from orchmllm.compat import veomni as cveomni
encoder_balance = cveomni.Qwen3VLEncoderDataBalance(4, dp_group=None)
images: orchmllm.Plan = encoder_balance.plan(np.array([0, 1, 2]), np.array([16, 4]))
table: list[list[torch.Tensor]] = cveomni.balanced_rank_table(torch.ones(3, 1), 2, dim=0)
'''
WRONG = "import orchmllm\norchmllm.balance([0, 1], [1]).makespan.upper()\n"


def site_packages() -> set[Path]:
    """The interpreter's site-packages directories (where mypy looks for installed packages)."""
    dirs = [*site.getsitepackages(), site.getusersitepackages(),
            sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    return {Path(d).resolve() for d in dirs}


def mypy_env() -> dict[str, str]:
    """mypy's environment: MYPYPATH names the directory holding the imported package, unless
    that is a site-packages directory (an installed package: mypy finds it there itself, PEP
    561, and refuses a MYPYPATH that names site-packages). No PYTHONPATH: mypy sees exactly
    that directory and the interpreter's installed packages (numpy, torch)."""
    package_root = Path(orchmllm.__file__).resolve().parents[1]
    env = {"PATH": ""}
    if package_root not in site_packages():
        env["MYPYPATH"] = str(package_root)
    return env


def mypy(tmp_path: Path, name: str, code: str) -> subprocess.CompletedProcess[str]:
    source = tmp_path / name
    source.write_text(code)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir",
         str(tmp_path / "cache"), str(source)],
        capture_output=True, text=True, env=mypy_env(), cwd=tmp_path, check=False)


def test_mypy_strict_accepts_the_package_and_its_use(tmp_path):
    out = mypy(tmp_path, "use.py", USE)
    assert "No module named mypy" not in out.stderr, "mypy missing: run bash .ci/install-deps"
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_rejects_a_wrong_use(tmp_path):
    out = mypy(tmp_path, "wrong.py", WRONG)
    assert '"float" has no attribute "upper"' in out.stdout, out.stdout + out.stderr


def test_mypy_types_the_version(tmp_path):
    out = mypy(tmp_path, "version.py", "import orchmllm\nreveal_type(orchmllm.__version__)\n")
    assert re.search(r'Revealed type is "(builtins\.)?str"', out.stdout), out.stdout + out.stderr
