"""Shared fixtures of the orchmllm Python tests (run by ctest python.pytest)."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest


@pytest.fixture
def bench() -> pathlib.Path:
    """The built orchmllm-bench (ctest sets ORCHMLLM_BENCH; without it the CLI tests skip)."""
    path = os.environ.get("ORCHMLLM_BENCH")
    if not path:
        pytest.skip("ORCHMLLM_BENCH is not set (ctest sets it to the built orchmllm-bench)")
    p = pathlib.Path(path)
    assert p.is_file(), f"ORCHMLLM_BENCH={path} does not exist"
    return p


@pytest.fixture
def step_reference() -> pathlib.Path:
    """The built C++ plan_step reference (ctest sets ORCHMLLM_STEP_REFERENCE; without it the
    comparison skips)."""
    path = os.environ.get("ORCHMLLM_STEP_REFERENCE")
    if not path:
        pytest.skip("ORCHMLLM_STEP_REFERENCE is not set (ctest sets it to the built "
                    "orchmllm_step_reference)")
    p = pathlib.Path(path)
    assert p.is_file(), f"ORCHMLLM_STEP_REFERENCE={path} does not exist"
    return p


def random_batch(seed: int, ranks: int, max_items: int, *, empty_ranks: bool = True,
                 max_length: int = 6000):
    """A ragged batch: offsets int64[D+1], lengths and bytes int64[n] (fixed seed)."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(0 if empty_ranks else 1, max_items + 1, size=ranks)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n = int(offsets[-1])
    lengths = np.minimum(rng.lognormal(6.5, 1.0, size=n).astype(np.int64), max_length)
    lengths[rng.random(n) < 0.05] = 0  # zero-length items are ordinary
    payload = lengths * rng.integers(1, 4, size=n)
    return offsets, lengths.astype(np.int64), payload.astype(np.int64)
