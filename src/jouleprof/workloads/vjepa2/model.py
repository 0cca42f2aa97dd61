"""The V-JEPA2 networks: a video ViT encoder that drops masked tokens, and a narrow predictor.

Shapes follow the reference (facebookresearch/vjepa2): tubelet patch embedding (Conv3d 2×16×16),
fixed 3-D sine-cosine position embeddings, pre-norm blocks with attention through
`F.scaled_dot_product_attention`, and a final LayerNorm. The context encoder gathers the kept
tokens right after the patch embedding, so its blocks cost in proportion to the context, not the
whole clip. The target encoder is a deep copy of the encoder, built by the trainer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from jouleprof.errors import ConfigError
from jouleprof.workloads.vjepa2.config import VJepa2Config

LAYER_NORM_EPS = 1e-6
INIT_STD = 0.02


def _sincos_1d(width: int, positions: torch.Tensor) -> torch.Tensor:
    half = width // 2
    omega = 1.0 / 10000 ** (torch.arange(half, dtype=torch.float64) / half)
    angles = positions.to(torch.float64)[:, None] * omega[None, :]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


def sincos_3d(width: int, grid: tuple[int, int, int]) -> torch.Tensor:
    """Fixed (T·H·W, width) position embedding: half the width for time, a quarter per axis.

    Raises:
        ConfigError: `width` is not a multiple of 8 (each axis needs an even sin/cos split).
    """
    if width % 8:
        raise ConfigError(
            f"a 3-D sincos embedding needs a width that is a multiple of 8, got {width}"
        )
    t, h, w = grid
    tt, hh, ww = torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij")
    parts = (
        _sincos_1d(width // 2, tt.reshape(-1)),
        _sincos_1d(width // 4, hh.reshape(-1)),
        _sincos_1d(width // 4, ww.reshape(-1)),
    )
    return torch.cat(parts, dim=1).to(torch.float32)


def take_tokens(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Rows `index` (B, K) of the tokens `x` (B, N, D), as (B, K, D)."""
    return torch.gather(x, 1, index.unsqueeze(-1).expand(-1, -1, x.size(-1)))


class Attention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        return self.proj(out.transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    """Pre-norm Transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, width: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        hidden = int(width * mlp_ratio)
        self.norm1 = nn.LayerNorm(width, eps=LAYER_NORM_EPS)
        self.attn = Attention(width, heads)
        self.norm2 = nn.LayerNorm(width, eps=LAYER_NORM_EPS)
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class Trunk(nn.Module):
    """A stack of blocks and a final LayerNorm, with optional per-block activation checkpointing."""

    def __init__(self, width: int, depth: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(width, heads, mlp_ratio) for _ in range(depth))
        self.norm = nn.LayerNorm(width, eps=LAYER_NORM_EPS)
        self.checkpointing = False
        # Entered around each block's recomputation in the backward: the attention-kernel choice
        # the forward ran under (checkpoint restores autocast itself, not `sdpa_kernel`). Without
        # it the recomputation may pick another kernel, whose saved tensors differ in shape, and
        # checkpoint refuses (seen on the H200: flash in the forward, cuDNN in the recompute).
        self.recompute_context: Callable[[], AbstractContextManager[object]] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Under no_grad (the target encoder) there is nothing to recompute, so skip the wrapper.
        recompute = self.checkpointing and torch.is_grad_enabled()
        kwargs = {}
        if recompute and self.recompute_context is not None:
            enter = self.recompute_context
            kwargs["context_fn"] = lambda: (nullcontext(), enter())
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False, **kwargs) if recompute else block(x)
        return self.norm(x)


def _init_weights(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, nn.Linear | nn.Conv3d):
            nn.init.trunc_normal_(m.weight, std=INIT_STD)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    # Residual branches of deeper blocks start smaller, as in the reference ViT (fix_init_weight).
    for layer, block in enumerate(module.trunk.blocks, start=1):
        with torch.no_grad():
            block.attn.proj.weight.div_(math.sqrt(2.0 * layer))
            block.fc2.weight.div_(math.sqrt(2.0 * layer))


class VideoEncoder(nn.Module):
    """Tubelet ViT; given kept-token indices it drops the others before the blocks."""

    def __init__(self, config: VJepa2Config) -> None:
        super().__init__()
        c = config
        self.patch_embed = nn.Conv3d(
            3,
            c.encoder_width,
            kernel_size=(c.tubelet_frames, c.patch_px, c.patch_px),
            stride=(c.tubelet_frames, c.patch_px, c.patch_px),
        )
        self.register_buffer("pos_embed", sincos_3d(c.encoder_width, c.grid), persistent=False)
        self.trunk = Trunk(c.encoder_width, c.encoder_depth, c.encoder_heads, c.mlp_ratio)
        _init_weights(self)

    def forward(self, clips: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """Tokens (B, N or K, width) of clips (B, 3, T, H, W); `keep` (B, K) selects tokens."""
        x = self.patch_embed(clips).flatten(2).transpose(1, 2) + self.pos_embed
        if keep is not None:
            x = take_tokens(x, keep)
        return self.trunk(x)


class Predictor(nn.Module):
    """Predicts target-token features from context tokens and per-mask-set learned mask tokens."""

    def __init__(self, config: VJepa2Config) -> None:
        super().__init__()
        c = config
        self.embed = nn.Linear(c.encoder_width, c.predictor_width)
        self.mask_tokens = nn.Parameter(torch.zeros(len(c.masks), c.predictor_width))
        self.register_buffer("pos_embed", sincos_3d(c.predictor_width, c.grid), persistent=False)
        self.trunk = Trunk(c.predictor_width, c.predictor_depth, c.predictor_heads, c.mlp_ratio)
        self.proj = nn.Linear(c.predictor_width, c.encoder_width)
        _init_weights(self)
        nn.init.zeros_(self.mask_tokens)  # reference: zero-initialized mask tokens

    def forward(
        self, context: torch.Tensor, keep: torch.Tensor, target: torch.Tensor, mask_set: int
    ) -> torch.Tensor:
        """Predicted features (B, K_target, encoder_width) at the `target` positions.

        Args:
            context: Context-encoder tokens (B, K_context, encoder_width).
            keep: Their flat positions (B, K_context).
            target: Flat positions to predict (B, K_target).
            mask_set: Which mask set, selecting its learned mask token.
        """
        x = self.embed(context) + self.pos_embed[keep]
        queries = self.mask_tokens[mask_set] + self.pos_embed[target]
        # The reference sorts tokens by position here; with full attention and absolute
        # position embeddings the order changes nothing, so the sort is left out.
        x = self.trunk(torch.cat([x, queries.to(x.dtype)], dim=1))
        return self.proj(x[:, keep.size(1) :])


def build_networks(config: VJepa2Config) -> tuple[VideoEncoder, Predictor]:
    """A fresh encoder and predictor on the current default device (use `torch.device(...)`)."""
    return VideoEncoder(config), Predictor(config)


def count_parameters(module: nn.Module) -> int:
    """Number of parameters (buffers excluded)."""
    return sum(p.numel() for p in module.parameters())
