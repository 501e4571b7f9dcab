"""orchmllm.plan_step gives the plans and routes of the C++ orchmllm::plan_step, called as a C++
trainer calls it (python/tests/step_reference.cpp, built by ctest's build as
orchmllm_step_reference): every plan (Π_M; per encoder Π_E_k, L_k, the composed route and its
inverse) bit for bit, and the routes of the rank asked for (the split sizes in bytes = the
Python AllToAll's rows x the transfer's row width)."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

import orchmllm
from test_step import batches

# (encoders as (name, cost, policy, pad, algorithm, mapping, in_bytes, out_bytes, split),
#  llm as (name, cost, policy, pad, algorithm, mapping, text_bytes), gpus per node)
CASES = [
    ([("vision", "quadratic:1,1e-3", "packed", 1, "automatic", "transport", 24, 32, False),
      ("audio", "linear", "padded", 1, "automatic", "transport", 16, 32, False)],
     ("llm", "quadratic:1,2.5e-4", "packed", 1, "automatic", "transport", 8), 4),
    ([("vision", "quadratic:1,1e-3", "packed", 1, "lpt", "bottleneck", 24, 32, True),
      ("audio", "linear", "padded", 8, "padded_exact", "identity", 16, 32, False)],
     ("llm", "linear", "packed", 1, "karmarkar_karp", "auction", 8), 2),
]


def stage(e: tuple) -> orchmllm.EncoderStage:
    name, cost, policy, pad, algorithm, mapping, i, o, split = e
    return orchmllm.EncoderStage(name, cost, policy, algorithm, pad_multiple=pad, mapping=mapping,
                                 input_row_bytes=i, output_row_bytes=o, split=split)


def reference_input(case: tuple, rank: int, seed: int) -> str:
    encoders, llm, g = case
    bs = batches(seed, segmented=any(e[8] for e in encoders))
    lines = [f"{len(encoders)} {len(bs)} {g} {rank}"]
    for name, cost, policy, pad, algorithm, mapping, i, o, split in encoders:
        lines.append(f"{name} {cost} {policy} {pad} {algorithm} {mapping} {i} {o} {int(split)}")
    lines.append(" ".join(str(x) for x in llm))
    for b in bs:
        lines.append(f"{b.num_samples} {b.num_sub_items}")
        lines.append(" ".join(map(str, b.text_tokens)))
        for row in zip(b.modality, b.parent, b.encoder_length, b.input_rows, b.llm_tokens,
                       b.segments):
            lines.append(" ".join(map(str, row)))
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_same_step_as_cpp(step_reference, case, seed):
    encoders, llm, g = CASES[case]
    rank = (3 * seed + case) % 8
    out = subprocess.run([str(step_reference)], input=reference_input(CASES[case], rank, seed),
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    ref = {}
    for line in out.stdout.splitlines():
        words = line.split()
        key_len = 2 if words[0] == "llm" else 3
        ref[" ".join(words[:key_len])] = np.array(words[key_len:], dtype=np.int64)

    decl = orchmllm.StageDeclarations([stage(e) for e in encoders], orchmllm.LLMStage(
        llm[0], llm[1], llm[2], llm[4], pad_multiple=llm[3], mapping=llm[5],
        text_row_bytes=llm[6]))
    meta = orchmllm.make_step_metadata(batches(seed, segmented=any(e[8] for e in encoders)),
                                       len(encoders))
    step = orchmllm.plan_step(decl, meta, g, rank=rank)
    plans = {"llm": step.llm_plan()}
    for k in range(len(encoders)):
        for kind in ("input", "lifted", "output", "gradient"):
            plans[f"{kind} {k}"] = step.encoder_plan(k, kind)
    for name, p in plans.items():
        np.testing.assert_array_equal(p.dst_rank, ref[f"{name} dst_rank"], err_msg=name)
        np.testing.assert_array_equal(p.dst_slot, ref[f"{name} dst_slot"], err_msg=name)
    K = len(encoders)
    transfers = ([("encoder_input", k, encoders[k][6]) for k in range(K)] + [("text", 0, llm[6])]
                 + [("encoder_output", k, encoders[k][7]) for k in range(K)]
                 + [("encoder_gradient", k, encoders[k][7]) for k in range(K)])
    assert len(transfers) == step.alltoalls_per_step
    for i, (name, k, width) in enumerate(transfers):
        a = step.all_to_all(name, rank, k)
        np.testing.assert_array_equal(a.send_splits * width, ref[f"route {i} send"], err_msg=name)
        np.testing.assert_array_equal(a.recv_splits * width, ref[f"route {i} recv"], err_msg=name)
