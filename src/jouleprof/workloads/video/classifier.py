"""`VideoClassifier`: any backbone behind one interface, clips in as (B, T, C, H, W), logits out."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class VideoClassifier(nn.Module):
    """A video backbone with its classification head.

    Attributes:
        spec: the model's `ModelSpec` (normalization, default clip, LoRA targets).
        net: the wrapped model (parameter names start with "net.").
        head_name: the classifier head's module name inside `net` (always trained).
        init: where the weights came from: {"weights", "source": random|local|hub, "note"}.
    """

    def __init__(
        self,
        spec: Any,
        net: nn.Module,
        *,
        head_name: str,
        channels_first: bool,
        hf_output: bool,
        block_names: tuple[str, ...],
        num_classes: int,
        frames: int,
        size: int,
        init: dict[str, Any],
    ) -> None:
        super().__init__()
        self.spec = spec
        self.net = net
        self.head_name = head_name
        self.num_classes = num_classes
        self.frames = frames
        self.size = size
        self.init = init
        self._channels_first = channels_first  # the backbone takes (B, C, T, H, W)
        self._hf_output = hf_output  # the backbone returns a ModelOutput with .logits
        self._block_names = block_names  # containers whose children are checkpointable blocks
        self.checkpointing = False

    @property
    def head(self) -> nn.Module:
        return self.net.get_submodule(self.head_name)

    def blocks(self) -> list[nn.Module]:
        """The backbone's transformer blocks (the units activation checkpointing recomputes)."""
        out: list[nn.Module] = []
        for name in self._block_names:
            children = list(self.net.get_submodule(name).children())
            # torchvision Swin3D: stages are Sequentials of blocks, PatchMerging between them.
            if any(isinstance(c, nn.Sequential) for c in children):
                children = [b for c in children if isinstance(c, nn.Sequential) for b in c]
            out.extend(children)
        return out

    def set_checkpointing(self, on: bool) -> None:
        """Recompute each block's activations in backward (non-reentrant checkpoints)."""
        for blk in self.blocks():
            if on and "_jp_forward" not in blk.__dict__:
                orig = blk.forward
                blk._jp_forward = orig

                def fwd(*args, _orig=orig, _blk=blk, **kwargs):
                    if not (_blk.training and torch.is_grad_enabled()):
                        return _orig(*args, **kwargs)
                    return checkpoint(_orig, *args, use_reentrant=False, **kwargs)

                blk.forward = fwd
            elif not on and "_jp_forward" in blk.__dict__:
                blk.forward = blk.__dict__.pop("_jp_forward")
        self.checkpointing = on

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 5:
            raise ValueError(f"clips must be (B, T, C, H, W), got shape {tuple(x.shape)}")
        if self._channels_first:
            x = x.permute(0, 2, 1, 3, 4)
        out = self.net(pixel_values=x) if self._hf_output else self.net(x)
        return out.logits if self._hf_output else out
