"""A stand-in for the ``veomni`` package under VeOmni's own tests of its encoder data balance.

Only what tests/parallel/encoder_data_balance/ imports: the parallel state (its data-parallel
group is the default group), the device helpers (CPU and gloo here) and
``veomni.utils.data_balance``, which is orchmllm.compat.veomni: the class and the sorting
functions under test are orchmllm's.
"""
