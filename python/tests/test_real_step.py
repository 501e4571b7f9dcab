"""python/benchmarks/real_step.py's inputs are the simulator's: a trace batch drawn by the
benchmark holds the same samples, in the same order, as ``orchmllm-bench workload --trace`` draws
(so ``simulate --trace --seed`` predicts the step that was measured); synthesized images have the
trace's patch counts in a shape the Qwen2-VL vision tower takes; malformed traces are refused
naming the line. The model runs are ctest python.real_step_short."""

from __future__ import annotations

import csv
import pathlib
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import real_step  # noqa: E402

TRACES = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "traces"


def read_items(path: pathlib.Path, ranks: int):
    per_rank = [[] for _ in range(ranks)]
    with open(path, encoding="utf-8") as f:
        for row in csv.DictReader(f):
            per_rank[int(row["rank"])].append((int(row["slot"]), int(row["length"])))
    return [np.array([l for _, l in sorted(r)], np.int64) for r in per_rank]


@pytest.mark.parametrize("trace", ["vl-sft-cpu.csv", "vl-sft-cpu-heldout.csv"])
@pytest.mark.parametrize("batch", [0, 5, 63])
def test_batches_are_the_cli_batches(bench, tmp_path: pathlib.Path, trace: str,
                                     batch: int) -> None:
    ranks, k = 3, 5
    t = real_step.Trace(str(TRACES / trace))
    subprocess.run([str(bench), "workload", "--trace", str(TRACES / trace), "--ranks",
                    str(ranks), "--samples-per-rank", str(k), "--seed", str(batch), "--out-dir",
                    str(tmp_path)], check=True, capture_output=True)
    vision = read_items(tmp_path / "vision.csv", ranks)
    llm = read_items(tmp_path / "llm.csv", ranks)
    for r in range(ranks):
        b = real_step.Batch(t, batch, ranks, k, r)
        assert b.patches.tolist() == vision[r].tolist()
        assert b.seq.tolist() == llm[r].tolist()
        assert (b.seq == b.text + b.image_tokens).all()
        lb = b.local_batch()
        assert lb.num_samples == k and lb.num_sub_items == len(b.patches)


def test_images_have_the_traces_patches() -> None:
    for p in [4, 8, 12, 68, 100, 1024, 4 * 997, 1620]:
        t, h, w = real_step.grid_of(p)
        assert (t, h * w) == (1, p) and h % 2 == 0 and w % 2 == 0 and h <= w
    assert real_step.pixels_of(3, 1, 8, real_step.torch.float32).shape == (8, real_step.PATCH_ROW)


@pytest.mark.parametrize("text, where", [
    ("sample,image,text_tokens\n0,4,1\n", "1: header"),
    ("sample,image_tokens,text_tokens\n0,6,1\n", "2: image patch counts must be positive"),
    ("sample,image_tokens,text_tokens\n0,4;x,1\n", "2:"),
    ("sample,image_tokens,text_tokens\n0,,0\n", "2: a sample needs text or an image"),
    ("sample,image_tokens,text_tokens\n0,4\n", "2: 2 fields"),
    ("sample,image_tokens,text_tokens\n", "no samples"),
])
def test_bad_traces_name_the_line(tmp_path: pathlib.Path, text: str, where: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=where):
        real_step.Trace(str(path))
