"""VeOmni's own tests of its encoder data balance, run against orchmllm.compat.veomni.

tests/parallel/encoder_data_balance/ holds VeOmni's two test files unchanged (NOTICE). The
``veomni`` they import is shim/veomni: ``veomni.utils.data_balance`` is orchmllm.compat.veomni,
the rest a minimal stand-in (a CPU machine: the 8 ranks torch.distributed.run starts use gloo).
test_balance_reverse.py starts its ranks with a path relative to VeOmni's repository root and
the environment of the test: the tests run from this folder, with the stand-in on PYTHONPATH.
"""

from __future__ import annotations

import os
import pathlib
import sys

import pytest

_HERE = pathlib.Path(__file__).resolve().parent
_SHIM = str(_HERE / "shim")
if _SHIM not in sys.path:
    sys.path.insert(0, _SHIM)


@pytest.fixture(autouse=True)
def _veomni_root(monkeypatch: pytest.MonkeyPatch) -> None:
    import orchmllm  # noqa: PLC0415

    # Absolute paths: the stand-in, the orchmllm package these tests import, then the rest.
    path = [_SHIM, str(pathlib.Path(orchmllm.__file__).resolve().parents[1])]
    path += [str(pathlib.Path(p).resolve())
             for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path))
    monkeypatch.chdir(_HERE)
