"""torchvision's Swin3D attention, calling its qkv and proj modules.

`ShiftedWindowAttention3d.forward` passes `self.qkv.weight` and `self.proj.weight` to
`F.linear` directly, so a wrapper placed on those layers (a PEFT LoRA layer, a bitsandbytes 4- or
8-bit layer) is bypassed: LoRA's update never reaches the output and its adapters get no gradient,
and a quantized weight is multiplied as raw storage. `patch_swin3d(model)` replaces that forward on
every attention module with `_attention`, the same computation with the two projections called as
modules. Unwrapped, its output equals torchvision's (tests/unit/test_video_models.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _attention(self, x: torch.Tensor) -> torch.Tensor:
    from torchvision.models.video import swin_transformer as sw

    b, t, h, w, c = x.shape
    window_size, shift_size = sw._get_window_and_shift_size(
        self.shift_size.copy(), [t, h, w], self.window_size.copy()
    )
    rel_bias = self.get_relative_position_bias(window_size)
    num_heads = self.num_heads
    pad = sw._compute_pad_size_3d((t, h, w), tuple(window_size))
    x = F.pad(x, (0, 0, 0, pad[2], 0, pad[1], 0, pad[0]))
    _, tp, hp, wp, _ = x.shape
    if sum(shift_size) > 0:
        x = torch.roll(x, shifts=(-shift_size[0], -shift_size[1], -shift_size[2]), dims=(1, 2, 3))
    nt, nh, nw = tp // window_size[0], hp // window_size[1], wp // window_size[2]
    num_windows = nt * nh * nw
    x = x.view(b, nt, window_size[0], nh, window_size[1], nw, window_size[2], c)
    x = x.permute(0, 1, 3, 5, 2, 4, 6, 7).reshape(
        b * num_windows, window_size[0] * window_size[1] * window_size[2], c
    )
    qkv = self.qkv(x)  # the module, not F.linear on its weight
    qkv = qkv.reshape(x.size(0), x.size(1), 3, num_heads, c // num_heads).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    q = q * (c // num_heads) ** -0.5
    attn = q.matmul(k.transpose(-2, -1)) + rel_bias
    if sum(shift_size) > 0:
        mask = sw._compute_attention_mask_3d(x, (tp, hp, wp), tuple(window_size), tuple(shift_size))
        attn = attn.view(x.size(0) // num_windows, num_windows, num_heads, x.size(1), x.size(1))
        attn = attn + mask.unsqueeze(1).unsqueeze(0)
        attn = attn.view(-1, num_heads, x.size(1), x.size(1))
    attn = F.softmax(attn, dim=-1)
    attn = F.dropout(attn, p=self.attention_dropout, training=self.training)
    x = attn.matmul(v).transpose(1, 2).reshape(x.size(0), x.size(1), c)
    x = self.proj(x)  # the module, not F.linear on its weight
    x = F.dropout(x, p=self.dropout, training=self.training)
    x = x.view(b, nt, nh, nw, window_size[0], window_size[1], window_size[2], c)
    x = x.permute(0, 1, 4, 2, 5, 3, 6, 7).reshape(b, tp, hp, wp, c)
    if sum(shift_size) > 0:
        x = torch.roll(x, shifts=(shift_size[0], shift_size[1], shift_size[2]), dims=(1, 2, 3))
    return x[:, :t, :h, :w, :].contiguous()


def patch_swin3d(model: nn.Module) -> int:
    """Make every Swin3D attention module call its qkv/proj modules; returns how many."""
    from torchvision.models.video.swin_transformer import ShiftedWindowAttention3d

    n = 0
    for m in model.modules():
        if isinstance(m, ShiftedWindowAttention3d):
            m.forward = _attention.__get__(m)
            n += 1
    return n
