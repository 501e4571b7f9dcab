"""The sorting functions under test: orchmllm's, under VeOmni's names."""

from orchmllm.compat.veomni import SORTING_ALGO_FUNC  # noqa: F401
