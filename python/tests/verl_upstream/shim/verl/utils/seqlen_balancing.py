"""The functions under test: orchmllm's drop-in replacements."""

from orchmllm.compat.verl import *  # noqa: F401,F403
from orchmllm.compat.verl import __all__  # noqa: F401
