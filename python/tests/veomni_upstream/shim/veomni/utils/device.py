"""VeOmni's device helpers on a machine without accelerators: CPU tensors, gloo process groups
(VeOmni's get_dist_comm_backend() raises without a GPU or NPU)."""

import torch


def get_device_type() -> str:
    return "cpu"


def get_torch_device():
    return torch.cpu


def get_dist_comm_backend() -> str:
    return "gloo"
