"""``verl.DataProto`` reduced to what orchmllm.compat.verl's functions use: a TensorDict
``batch``, a dict of numpy arrays ``non_tensor_batch`` and a dict ``meta_info``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

import torch
from tensordict import TensorDict


@dataclass
class DataProto:
    batch: Optional[TensorDict] = None
    non_tensor_batch: Dict[str, Any] = field(default_factory=dict)
    meta_info: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_single_dict(cls, data: Dict[str, Any], meta_info: Optional[dict] = None) -> "DataProto":
        tensors = {k: v for k, v in data.items() if isinstance(v, torch.Tensor)}
        others = {k: v for k, v in data.items() if not isinstance(v, torch.Tensor)}
        return cls.from_dict(tensors, others, meta_info)

    @classmethod
    def from_dict(cls, tensors: Dict[str, torch.Tensor], non_tensors: Optional[dict] = None,
                  meta_info: Optional[dict] = None) -> "DataProto":
        rows = next(iter(tensors.values())).shape[0]
        return cls(TensorDict(tensors, batch_size=[rows]), dict(non_tensors or {}),
                   dict(meta_info or {}))

    def __len__(self) -> int:
        return int(self.batch.batch_size[0])
