"""The ```python blocks of docs/python.md and README.md run as a reader would run them: each in a
fresh namespace (it runs on its own), except a block whose first line says it continues the
block above ("# Continues the block above..."), which runs in that block's namespace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
CONTINUES = "# Continues the block above"


@pytest.mark.parametrize("name,minimum", [("docs/python.md", 6), ("README.md", 1)])
def test_python_blocks_run(name, minimum):
    blocks = BLOCK.findall((ROOT / name).read_text())
    assert len(blocks) >= minimum, f"{name}: {len(blocks)} python blocks, expected >= {minimum}"
    namespace: dict = {}
    for i, code in enumerate(blocks, 1):
        if not code.startswith(CONTINUES):
            namespace = {"__name__": f"docs_{Path(name).stem}_{i}"}
        exec(compile(code, f"{name} python block {i}", "exec"), namespace)
