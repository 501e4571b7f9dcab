"""VeOmni's parallel state reduced to a data-parallel group over every rank."""

from __future__ import annotations

from typing import Any, Optional

import torch.distributed as dist


class ParallelState:
    def __init__(self, dp_size: int, dp_mode: str) -> None:
        if dp_size != dist.get_world_size():
            raise ValueError(f"the stand-in holds one data-parallel group over every rank: "
                             f"dp_size {dp_size}, world size {dist.get_world_size()}")
        self.dp_size, self.dp_mode = dp_size, dp_mode

    @property
    def dp_group(self) -> Optional[dist.ProcessGroup]:
        return dist.group.WORLD


_STATE: Optional[ParallelState] = None


def init_parallel_state(dp_size: int = 1, dp_mode: str = "fsdp2", **_: Any) -> None:
    global _STATE
    _STATE = ParallelState(dp_size, dp_mode)


def get_parallel_state() -> ParallelState:
    if _STATE is None:
        raise RuntimeError("init_parallel_state has not run")
    return _STATE
