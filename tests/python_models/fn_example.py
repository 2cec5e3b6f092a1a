"""A function for the fn op, in a file of its own: TorchScript reads its source."""
import torch


def double(act: torch.Tensor) -> torch.Tensor:
    return act * 2.0
