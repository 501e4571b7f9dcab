"""ctest python.wheel: a wheel builds from the repository, holds the package and nothing else,
and the installed wheel imports and balances (away from the build tree).

usage: python wheel_check.py SOURCE_DIR WORK_DIR
Runs `pip wheel SOURCE_DIR --no-deps --no-build-isolation` (a Debug build; the running Python needs
scikit-build-core, nanobind and numpy: .ci/install-deps puts them in .venv). Not a pytest file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

USE = """
import numpy as np, orchmllm, sys
assert orchmllm.__file__.startswith(sys.argv[1]), orchmllm.__file__
assert "torch" not in sys.modules, "import orchmllm imported torch (an optional dependency)"
plan = orchmllm.balance(np.array([0, 3, 4, 9, 9]), np.array([1500, 900, 400, 120, 300, 2000,
                        1200, 1000, 640]), cost="quadratic:1,1.3e-5", policy="packed")
assert plan.dst_rank.shape == (9,) and plan.makespan >= plan.lower_bound > 0
try:
    orchmllm.balance([0, 1], [-1])
except orchmllm.InvalidArgumentError as e:
    assert "negative length" in str(e)
else:
    raise AssertionError("no error for a negative length")
print("wheel_check: installed wheel ok:", orchmllm.__file__)
"""


def main() -> int:
    source, work = Path(sys.argv[1]), Path(sys.argv[2])
    shutil.rmtree(work, ignore_errors=True)
    dist, site = work / "dist", work / "site"
    # Unoptimised: what is checked is the wheel's layout and that it imports and runs; the
    # module's code is python.pytest's (about half the compile time of a Release build).
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps",
                    "--no-build-isolation", "--disable-pip-version-check", "-q",
                    "--config-settings=cmake.build-type=Debug", "-w", str(dist)], check=True)
    wheels = sorted(dist.glob("orchmllm-*.whl"))
    assert len(wheels) == 1, f"expected one orchmllm wheel in {dist}, got {wheels}"
    names = zipfile.ZipFile(wheels[0]).namelist()
    package = [n for n in names if n.startswith("orchmllm/")]
    others = [n for n in names if not n.startswith(("orchmllm/", "orchmllm-"))]
    assert not others, f"the wheel holds files outside the package: {others}"
    for want in ["orchmllm/__init__.py", "orchmllm/py.typed", "orchmllm/_orchmllm.pyi",
                 "orchmllm/step.py", "orchmllm/torch.py", "orchmllm/context_parallel.py",
                 "orchmllm/compat/__init__.py",
                 "orchmllm/compat/_common.py",
                 "orchmllm/compat/verl.py", "orchmllm/compat/veomni.py"]:
        assert want in package, f"{want} missing from {wheels[0].name}: {package}"
    assert any(n.startswith("orchmllm/_orchmllm.") and n.endswith((".so", ".pyd"))
               for n in package), f"no native module in {wheels[0].name}: {package}"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                    "--disable-pip-version-check", "-q", "--target", str(site),
                    str(wheels[0])], check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    subprocess.run([sys.executable, "-c", USE, str(site)], check=True, env=env, cwd=work)
    print(f"wheel_check: {wheels[0].name}: {len(package)} package files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
