"""A stand-in for the ``verl`` package under verl's own tests of its seqlen_balancing module.

Only what tests/utils/test_seqlen_balancing.py imports: ``verl.DataProto`` (a minimal container:
the functions under test only read ``batch``, ``non_tensor_batch`` and ``meta_info`` and build
micro-batches with ``from_dict``), the device helpers (CPU and gloo here), verl's random mask
generator (the tests' inputs, copied) and ``verl.utils.seqlen_balancing``, which is
orchmllm.compat.verl: the functions under test are orchmllm's.
"""

from .protocol import DataProto

__all__ = ["DataProto"]
