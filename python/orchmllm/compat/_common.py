"""What the framework adapters share."""

from __future__ import annotations

import numpy as np


def one_source(n: int, k: int) -> np.ndarray:
    """CSR offsets of k ranks where rank 0 holds all n items: orchmllm.balance partitioning one
    list into k (where the items come from does not matter)."""
    offsets = np.full(k + 1, n, dtype=np.int64)
    offsets[0] = 0
    return offsets
