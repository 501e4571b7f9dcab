"""The class under test: orchmllm's drop-in replacement."""

from orchmllm.compat.veomni import Qwen3VLEncoderDataBalance  # noqa: F401
