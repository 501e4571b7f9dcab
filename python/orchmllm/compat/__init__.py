"""Drop-in replacements for the balancing functions of PyTorch training frameworks.

Each submodule keeps one framework's names, signatures and return shapes and plans with
orchmllm's balancers, so a trainer switches by changing one import:

* :mod:`orchmllm.compat.verl`: ``verl.utils.seqlen_balancing`` (data-parallel partitions,
  micro-batches under a token budget).
* :mod:`orchmllm.compat.veomni`: VeOmni's vision-encoder data balance
  (``Qwen3VLEncoderDataBalance``: the encoder's inputs balanced over the data-parallel group,
  its outputs brought home with autograd).

Importing :mod:`orchmllm.compat` imports nothing else; each submodule imports what its framework
uses (torch). See docs/python.md, "Coming from verl" and "Coming from VeOmni".
"""
