"""verl's device helpers on a machine without accelerators: CPU tensors, gloo process groups
(verl's get_nccl_backend() names NCCL, which needs a GPU per rank)."""

import torch


def get_device_name() -> str:
    return "cpu"


def get_torch_device():
    return torch.cpu


def get_nccl_backend() -> str:
    return "gloo"
