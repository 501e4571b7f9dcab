"""Scales a length trace (``sample,image_tokens,text_tokens``, docs/tool.md "Traces") for a
smaller model: every image's patch count divided by ``--image-divisor`` (rounded to a multiple of
4, at least 4: 2 x 2 patches per LLM token) and every sample's text tokens by
``--text-divisor`` (rounded, at least 1). The shape of the distribution is kept, so a CPU-sized
model (python/benchmarks/real_step.py) sees the same relative imbalance as the trace's.

    python scale_trace.py IN.csv OUT.csv [--image-divisor 16] [--text-divisor 4] [--rows N]
"""

from __future__ import annotations

import argparse


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace_in")
    p.add_argument("trace_out")
    p.add_argument("--image-divisor", type=float, default=16.0)
    p.add_argument("--text-divisor", type=float, default=4.0)
    p.add_argument("--rows", type=int, default=0, help="keep the first N rows (0: all)")
    a = p.parse_args()
    with open(a.trace_in, encoding="utf-8") as f:
        header, *rows = [line.strip() for line in f if line.strip()]
    if header != "sample,image_tokens,text_tokens":
        raise SystemExit(f"{a.trace_in}:1: header {header!r}, expected "
                         "'sample,image_tokens,text_tokens'")
    out = [header]
    for i, line in enumerate(rows[:a.rows] if a.rows else rows):
        _, images, text = line.split(",")
        scaled = [max(4, 4 * round(int(x) / a.image_divisor / 4)) for x in images.split(";")
                  if x]
        out.append(f"{i},{';'.join(map(str, scaled))},"
                   f"{max(1, round(int(text) / a.text_divisor))}")
    with open(a.trace_out, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
