"""balance releases the GIL: while a worker thread balances 163,840 items, the main thread keeps
running Python code. With the GIL held for the whole call the main thread could run for at most
about one switch interval (1 ms here) of a call of tens of milliseconds."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np

import orchmllm


def spin(count: list, done: list, seconds: float) -> None:
    """The main thread's work: count until `done[0]` or `seconds` pass."""
    stop = time.perf_counter() + seconds
    while not done[0] and time.perf_counter() < stop:
        count[0] += 1


def test_balance_releases_the_gil():
    rng = np.random.default_rng(1)
    d, k = 2560, 64
    lengths = rng.integers(1, 8000, size=d * k)
    offsets = np.arange(0, d * k + 1, k)
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    try:
        count, done, rates = [0], [False], []
        spin(count, done, 0.05)
        alone = count[0] / 0.05

        def worker():
            for _ in range(5):
                before, start = count[0], time.perf_counter()
                orchmllm.balance(offsets, lengths, "quadratic:1,1.3e-5", algorithm="automatic")
                rates.append((count[0] - before) / (time.perf_counter() - start))
            done[0] = True

        thread = threading.Thread(target=worker)
        thread.start()
        spin(count, done, 60)
        thread.join()
    finally:
        sys.setswitchinterval(old)
    # Held GIL: about 1 ms of progress per call of >= 10 ms, i.e. <= ~0.1 of the bare rate.
    print(f"main-thread rate during balance: {max(rates) / alone:.2f} of its rate alone")
    assert max(rates) >= 0.25 * alone, (max(rates), alone)
