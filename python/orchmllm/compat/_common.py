"""What the framework adapters share."""

from __future__ import annotations

from typing import Any, List

import numpy as np


def one_source(n: int, k: int) -> np.ndarray:
    """CSR offsets of k ranks where rank 0 holds all n items: orchmllm.balance partitioning one
    list into k (where the items come from does not matter)."""
    offsets = np.full(k + 1, n, dtype=np.int64)
    offsets[0] = 0
    return offsets


def parts_of(dst_rank: Any, k: int) -> List[List[int]]:
    """Item ids by destination rank (a plan's ``dst_rank``), k lists, each ascending. O(n log n)."""
    dst = np.asarray(dst_rank)
    order = np.argsort(dst, kind="stable")
    bounds = np.cumsum(np.bincount(dst, minlength=k))[:-1]
    return [part.tolist() for part in np.split(order, bounds)]
