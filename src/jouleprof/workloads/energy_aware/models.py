"""The energy-aware study's architectures: an MLP, a CNN and small ViTs, sized by their config.

Every model takes images (B, C, H, W) and returns logits (B, n_classes). Each is built from an
`ArchConfig` (named presets in `ARCHS`, fields replaceable one by one) and the dataset's shape.
The MLP and CNN use ReLU, whose zeros are exact; the ViT uses GELU by default (activation="relu"
switches it), so its activations are rarely exactly zero — which matters for nonzero-MAC counts.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

ACTIVATIONS = ("relu", "gelu")
FAMILIES = ("mlp", "cnn", "vit")


@dataclass(frozen=True)
class ArchConfig:
    """One architecture and its size."""

    family: str = "mlp"
    """mlp, cnn or vit."""
    width: int = 256
    """MLP: hidden units per layer; CNN: channels of the first stage (doubled per stage);
    ViT: embedding dimension."""
    depth: int = 3
    """MLP: hidden layers; CNN: conv stages (two 3×3 convs each, 2× downsampling after each
    but the last); ViT: transformer blocks."""
    heads: int = 4
    """ViT: attention heads (must divide width)."""
    mlp_ratio: float = 2.0
    """ViT: hidden size of each block's MLP as a multiple of width."""
    patch: int | None = None
    """ViT: patch size in pixels; None: the smallest divisor of the image side giving ≤ 64
    tokens."""
    activation: str | None = None
    """relu or gelu; None: the family's own (relu for MLP/CNN, gelu for ViT)."""

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES}, got {self.family!r}")
        for name in ("width", "depth", "heads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be ≥ 1, got {getattr(self, name)}")
        if self.family == "vit" and self.width % self.heads:
            raise ValueError(f"heads ({self.heads}) must divide width ({self.width}) for a ViT")
        if not self.mlp_ratio > 0:
            raise ValueError(f"mlp_ratio must be > 0, got {self.mlp_ratio}")
        if self.patch is not None and self.patch < 1:
            raise ValueError(f"patch must be ≥ 1, got {self.patch}")
        if self.activation is not None and self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")

    @property
    def act(self) -> str:
        return self.activation or ("gelu" if self.family == "vit" else "relu")


ARCHS: dict[str, ArchConfig] = {
    "mlp": ArchConfig("mlp", width=256, depth=3),
    "mlp-large": ArchConfig("mlp", width=2048, depth=4),
    "cnn": ArchConfig("cnn", width=32, depth=2),
    "cnn-large": ArchConfig("cnn", width=128, depth=3),
    "vit-tiny": ArchConfig("vit", width=128, depth=4, heads=4, mlp_ratio=2.0),
    "vit-small": ArchConfig("vit", width=384, depth=6, heads=6, mlp_ratio=4.0),
}
ARCH_FIELDS = tuple(f.name for f in fields(ArchConfig) if f.name != "family")


def arch_config(name: str, **overrides: Any) -> ArchConfig:
    """The preset `name` with fields replaced by `overrides` (None values are ignored)."""
    if name not in ARCHS:
        raise ValueError(f"unknown architecture {name!r}: choose one of {', '.join(ARCHS)}")
    bad = [k for k in overrides if k not in ARCH_FIELDS]
    if bad:
        raise ValueError(f"unknown architecture field(s) {bad}: valid are {', '.join(ARCH_FIELDS)}")
    return replace(ARCHS[name], **{k: v for k, v in overrides.items() if v is not None})


def vit_patch(side: int, max_tokens: int = 64) -> int:
    """The smallest divisor p of `side` with (side / p)² ≤ max_tokens."""
    for p in range(1, side + 1):
        if side % p == 0 and (side // p) ** 2 <= max_tokens:
            return p
    return side


def build_model(cfg: ArchConfig, in_shape: tuple[int, int, int], n_classes: int):
    """A torch.nn.Module for images of `in_shape` (C, H, W) and `n_classes` classes."""
    import torch.nn as nn

    act = {"relu": nn.ReLU, "gelu": nn.GELU}[cfg.act]
    c, h, w = in_shape
    if cfg.family == "mlp":
        layers: list[Any] = [nn.Flatten()]
        d = c * h * w
        for _ in range(cfg.depth):
            layers += [nn.Linear(d, cfg.width), act()]
            d = cfg.width
        layers.append(nn.Linear(d, n_classes))
        return nn.Sequential(*layers)
    if cfg.family == "cnn":
        layers = []
        ch_in, ch = c, cfg.width
        for stage in range(cfg.depth):
            layers += [nn.Conv2d(ch_in, ch, 3, padding=1), act(), nn.Conv2d(ch, ch, 3, padding=1)]
            layers.append(act())
            if stage < cfg.depth - 1 and min(h, w) >= 2:
                layers.append(nn.MaxPool2d(2))
                h, w = h // 2, w // 2
            ch_in, ch = ch, ch * 2
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(ch_in, n_classes)]
        return nn.Sequential(*layers)
    return _ViT(cfg, in_shape, n_classes, act)


def _vit_module():
    import torch
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, dim: int, heads: int, hidden: int, act) -> None:
            super().__init__()
            self.norm1 = nn.LayerNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)
            self.norm2 = nn.LayerNorm(dim)
            self.fc1 = nn.Linear(dim, hidden)
            self.act = act()
            self.fc2 = nn.Linear(hidden, dim)
            self.heads = heads

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.norm1(x)).reshape(b, t, 3, self.heads, -1).unbind(2)
            a = nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            )
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(self.act(self.fc1(self.norm2(x))))

    class ViT(nn.Module):
        def __init__(self, cfg: ArchConfig, in_shape, n_classes: int, act) -> None:
            super().__init__()
            c, h, w = in_shape
            p = cfg.patch or vit_patch(min(h, w))
            if h % p or w % p:
                raise ValueError(f"patch {p} does not divide the image size {h}×{w}")
            self.patch_embed = nn.Conv2d(c, cfg.width, p, stride=p)
            tokens = (h // p) * (w // p)
            self.pos = nn.Parameter(torch.zeros(1, tokens, cfg.width))
            nn.init.trunc_normal_(self.pos, std=0.02)
            hidden = max(1, int(cfg.width * cfg.mlp_ratio))
            self.blocks = nn.ModuleList(
                Block(cfg.width, cfg.heads, hidden, act) for _ in range(cfg.depth)
            )
            self.norm = nn.LayerNorm(cfg.width)
            self.head = nn.Linear(cfg.width, n_classes)

        def forward(self, x):
            x = self.patch_embed(x).flatten(2).transpose(1, 2) + self.pos
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.norm(x).mean(dim=1))

    return ViT


def _ViT(cfg: ArchConfig, in_shape, n_classes: int, act):
    return _vit_module()(cfg, in_shape, n_classes, act)


def parameter_count(model: Any) -> int:
    return int(sum(p.numel() for p in model.parameters()))
