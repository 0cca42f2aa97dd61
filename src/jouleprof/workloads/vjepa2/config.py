"""The configuration of a V-JEPA2 training run: model shape, masks, schedule, precision, data.

One frozen dataclass; named presets live in `presets.py`. Every field maps one to one onto a CLI
flag. The module imports no torch, so a CLI can build and validate a config cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass

from jouleprof.errors import ConfigError
from jouleprof.workloads.vjepa2.masks import REFERENCE_MASKS, MaskSpec

DTYPES: tuple[str, ...] = ("bf16", "fp32")
OPTIMIZER_IMPLS: tuple[str, ...] = ("fused", "foreach", "default")
ATTENTION_BACKENDS: tuple[str, ...] = ("flash", "auto")


@dataclass(frozen=True)
class VJepa2Config:
    """A V-JEPA2 pretraining step (facebookresearch/vjepa2, app/vjepa/train.py) and its run."""

    encoder_width: int = 1280
    """Token width of the context and target encoders (ViT embed dim)."""
    encoder_depth: int = 32
    """Number of Transformer blocks in each encoder."""
    encoder_heads: int = 16
    """Attention heads per encoder block; must divide `encoder_width`."""
    mlp_ratio: float = 4.0
    """Hidden width of each block's MLP, as a multiple of the block's width."""
    patch_px: int = 16
    """Spatial side of a patch, in pixels."""
    tubelet_frames: int = 2
    """Frames per tubelet: the temporal extent of one token."""
    num_frames: int = 16
    """Frames per clip fed to the model; must be a multiple of `tubelet_frames`."""
    crop_px: int = 224
    """Side of the square crop, in pixels; must be a multiple of `patch_px`."""
    frame_stride: int = 4
    """Distance between sampled frames in the source video, in frames."""
    predictor_depth: int = 12
    """Number of Transformer blocks in the predictor."""
    predictor_width: int = 384
    """Token width inside the predictor."""
    predictor_heads: int = 12
    """Attention heads per predictor block; must divide `predictor_width`."""
    masks: tuple[MaskSpec, ...] = REFERENCE_MASKS
    """Mask sets sampled per clip; the predictor and the context encoder run once per set."""
    batch_size: int = 8
    """Clips per micro-batch."""
    grad_accum_steps: int = 1
    """Micro-batches per optimizer step; one step trains on batch_size × grad_accum_steps clips."""
    lr_start: float = 2e-4
    """Learning rate at step 0, ramped linearly to `lr_peak` over the warm-up."""
    lr_peak: float = 6.25e-4
    """Learning rate at the end of the warm-up, then decayed by a half cosine."""
    lr_final: float = 1e-6
    """Learning rate at the end of the schedule (`total_steps`)."""
    warmup_steps: int = 40
    """Optimizer steps of linear learning-rate warm-up."""
    total_steps: int = 10_000
    """Length of the learning-rate and EMA schedules, in optimizer steps."""
    weight_decay: float = 0.04
    """AdamW weight decay on weights of two or more dimensions (never on biases or 1-D params)."""
    ema_start: float = 0.998
    """EMA momentum of the target encoder at step 0."""
    ema_end: float = 1.0
    """EMA momentum at `total_steps`, reached linearly."""
    dtype: str = "bf16"
    """'bf16': forward under bfloat16 autocast (weights, optimizer in fp32); 'fp32': no autocast."""
    activation_checkpointing: bool = False
    """Recompute each trainable block's activations in the backward pass instead of storing them."""
    compile: bool = False
    """torch.compile the encoders and predictor (dynamic shapes; the first step takes minutes)."""
    optimizer_impl: str = "fused"
    """AdamW kernel: 'fused' (CUDA only, else falls back to 'foreach'), 'foreach', 'default'."""
    attention_backend: str = "flash"
    """SDPA kernels allowed: 'flash' (flash attention, then memory-efficient, then math), or
    'auto' (PyTorch's own choice). The masks change the context length every batch; on the H200
    with torch 2.11 'auto' picked cuDNN attention, which builds a plan for every new length:
    0.58 s steps instead of 0.18–0.20 s at vit_huge batch 8
    (benchmarks/results/diagnose_step)."""
    num_workers: int = 4
    """DataLoader worker processes decoding video; 0 decodes in the training process."""
    seed: int = 0
    """Seed of weights, masks, crops and the data order."""

    def __post_init__(self) -> None:
        positive = [
            "encoder_width",
            "encoder_depth",
            "encoder_heads",
            "patch_px",
            "tubelet_frames",
            "num_frames",
            "crop_px",
            "frame_stride",
            "predictor_depth",
            "predictor_width",
            "predictor_heads",
            "batch_size",
            "grad_accum_steps",
            "total_steps",
        ]
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("activation_checkpointing", "compile"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}")
        pairs = (
            ("encoder_width", "encoder_heads"),
            ("predictor_width", "predictor_heads"),
            ("num_frames", "tubelet_frames"),
            ("crop_px", "patch_px"),
        )
        for big, small in pairs:
            if getattr(self, big) % getattr(self, small):
                raise ConfigError(
                    f"{big} ({getattr(self, big)}) must be a multiple of {small} "
                    f"({getattr(self, small)})"
                )
        if self.mlp_ratio <= 0:
            raise ConfigError(f"mlp_ratio must be > 0, got {self.mlp_ratio!r}")
        if not self.masks or not all(isinstance(m, MaskSpec) for m in self.masks):
            raise ConfigError(f"masks must be a non-empty tuple of MaskSpec, got {self.masks!r}")
        for name in ("lr_start", "lr_peak", "lr_final", "weight_decay"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if not 0 <= self.warmup_steps <= self.total_steps:
            raise ConfigError(
                f"warmup_steps must be in [0, total_steps={self.total_steps}], "
                f"got {self.warmup_steps!r}"
            )
        for name in ("ema_start", "ema_end"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"{name} must be in [0, 1], got {getattr(self, name)!r}")
        if self.attention_backend not in ATTENTION_BACKENDS:
            raise ConfigError(
                f"attention_backend must be one of {', '.join(ATTENTION_BACKENDS)}, "
                f"got {self.attention_backend!r}"
            )
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.optimizer_impl not in OPTIMIZER_IMPLS:
            raise ConfigError(
                f"optimizer_impl must be one of {', '.join(OPTIMIZER_IMPLS)}, "
                f"got {self.optimizer_impl!r}"
            )
        if self.num_workers < 0:
            raise ConfigError(f"num_workers must be >= 0, got {self.num_workers!r}")

    @property
    def grid(self) -> tuple[int, int, int]:
        """Token grid (time, height, width) of one clip."""
        side = self.crop_px // self.patch_px
        return (self.num_frames // self.tubelet_frames, side, side)

    @property
    def num_tokens(self) -> int:
        """Tokens of a whole clip (1568 for 16 frames at 224² with 2×16×16 tubelets)."""
        t, h, w = self.grid
        return t * h * w

    @property
    def samples_per_step(self) -> int:
        """Clips consumed by one optimizer step."""
        return self.batch_size * self.grad_accum_steps
