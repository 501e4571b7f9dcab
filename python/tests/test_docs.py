"""The ```python blocks of docs/python.md and README.md run (each file's blocks in order, in one
namespace, so a later block may use what an earlier one defined)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


@pytest.mark.parametrize("name,minimum", [("docs/python.md", 6), ("README.md", 1)])
def test_python_blocks_run(name, minimum):
    blocks = BLOCK.findall((ROOT / name).read_text())
    assert len(blocks) >= minimum, f"{name}: {len(blocks)} python blocks, expected >= {minimum}"
    namespace: dict = {"__name__": f"docs_{Path(name).stem}"}
    for i, code in enumerate(blocks, 1):
        exec(compile(code, f"{name} python block {i}", "exec"), namespace)
