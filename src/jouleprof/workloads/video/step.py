"""`VideoTrainer`: one video classifier, adapted and set to a precision, trained a step at a time.

The probe, the `video` workload (profile / cells) and `jouleprof run video` share it. A step marks
its phases through a `PhaseMarker`: the caller's "data" (fetching and copying the batch), then
"forward" (autocast forward and loss), "backward" (scaled where the precision scales the loss) and
"optimizer" (AdamW over the trainable parameters, AdaLoRA's rank allocation, zeroing grads).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from jouleprof.timeline.markers import NullRecorder, PhaseMarker
from jouleprof.workloads.video.adapt import AdaptConfig, check_method

OPTIMIZER_IMPLS = ("fused", "foreach", "default")


@dataclass(frozen=True)
class TrainerConfig:
    """What is trained and how."""

    model: str = "hiera-b"
    """A name of the video model registry (`models.model_names()`)."""
    method: str = "lora"
    """full, lora, qlora, adalora or bitfit."""
    precision: str = "bf16"
    """fp32, fp16, bf16 or int8."""
    num_classes: int = 20
    """Classes of the classifier head."""
    batch_size: int = 4
    """Clips per step."""
    frames: int | None = None
    """Frames per clip; None: the model's default (4 when tiny)."""
    size: int | None = None
    """Frame side in pixels; None: the model's default (32 when tiny)."""
    lr: float = 1e-4
    """AdamW learning rate."""
    weight_decay: float = 0.05
    """AdamW weight decay (not applied to biases and other 1-D parameters)."""
    checkpointing: bool = False
    """Recompute each block's activations in backward (activation checkpointing)."""
    tiny: bool = False
    """A few-layer config of the model's family (CPU tests)."""
    weights: str | None = None
    """Local path or hub id of pretrained weights; None: random initialization."""
    optimizer_impl: str = "fused"
    """AdamW kernel: fused (CUDA; falls back to foreach elsewhere), foreach or default."""
    adapt: AdaptConfig = field(default_factory=AdaptConfig)
    """Hyper-parameters of the adapter methods."""
    seed: int = 0
    """Seed of the model's random initialization."""

    def __post_init__(self) -> None:
        from jouleprof.workloads.video.models import get_spec
        from jouleprof.workloads.video.precision import check_pair

        get_spec(self.model)
        check_method(self.method)
        check_pair(self.method, self.precision)
        if self.optimizer_impl not in OPTIMIZER_IMPLS:
            raise ValueError(
                f"unknown optimizer_impl {self.optimizer_impl!r}: choose one of "
                f"{', '.join(OPTIMIZER_IMPLS)}"
            )
        for f in ("num_classes", "batch_size"):
            if getattr(self, f) < 1:
                raise ValueError(f"{f} must be ≥ 1, got {getattr(self, f)}")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if isinstance(self.adapt, dict):  # from JSON
            object.__setattr__(self, "adapt", AdaptConfig(**self.adapt))

    @property
    def clip(self) -> tuple[int, int]:
        """(frames, size) actually fed."""
        from jouleprof.workloads.video.models import get_spec

        spec = get_spec(self.model)
        return (
            self.frames or (4 if self.tiny else spec.frames),
            self.size or (32 if self.tiny else spec.size),
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _param_groups(model, weight_decay: float) -> list[dict]:
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (no_decay if p.ndim <= 1 else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return [g for g in groups if g["params"]]


class VideoTrainer:
    """Builds the model (random or loaded weights), adapts it, and trains it step by step."""

    def __init__(self, cfg: TrainerConfig, device: Any, marker: PhaseMarker | None = None) -> None:
        import torch

        from jouleprof.workloads.video.adapt import adapt
        from jouleprof.workloads.video.models import build_model
        from jouleprof.workloads.video.precision import get_precision, grad_scaler

        self._torch = torch
        self.cfg = cfg
        self.device = torch.device(device)
        self.marker = marker or NullRecorder()
        self.precision = get_precision(cfg.precision)
        frames, size = cfg.clip
        torch.manual_seed(cfg.seed)

        def make():
            return build_model(
                cfg.model,
                cfg.num_classes,
                weights=cfg.weights,
                tiny=cfg.tiny,
                frames=frames,
                size=size,
            )

        # Random initialization runs on the GPU where nothing is quantized: initializing ~100 M
        # parameters on the host took seconds a cell. A quantized base is built on the host:
        # bitsandbytes quantizes a weight as it moves to the GPU.
        quantized = cfg.method == "qlora" or self.precision.base_bits is not None
        vc = None
        if self.device.type == "cuda" and cfg.weights is None and not quantized:
            try:
                with self.device:
                    vc = make()
            except Exception:  # a builder that cannot initialize on the device: the host then
                vc = None
        if vc is None:
            vc = make()
        self.classifier = vc
        self.model = adapt(vc, cfg.method, cfg.precision, cfg.adapt, device=self.device)
        if cfg.checkpointing:
            vc.set_checkpointing(True)
        self.model.train()
        groups = _param_groups(self.model, cfg.weight_decay)
        impl = cfg.optimizer_impl
        if impl == "fused" and self.device.type != "cuda":
            impl = "foreach"  # fused AdamW is the CUDA kernel this protocol names
        kw = {"fused": True} if impl == "fused" else {"foreach": impl == "foreach"}
        self.optimizer_impl = impl
        self.optimizer = torch.optim.AdamW(groups, lr=cfg.lr, **kw)
        self.scaler = grad_scaler(self.precision, self.device)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.global_step = 0

    # -- training -----------------------------------------------------------------------
    def _forward_loss(self, x, y):
        from jouleprof.workloads.video.adapt import extra_loss
        from jouleprof.workloads.video.precision import autocast

        with autocast(self.precision, self.device):
            logits = self.model(x)
            loss = self.loss_fn(logits.float(), y)
            reg = extra_loss(self.model)
            if reg is not None:
                loss = loss + reg
        return loss

    def _backward(self, loss) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def _optimizer_step(self) -> None:
        from jouleprof.workloads.video.adapt import after_step

        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.global_step += 1
        after_step(self.model, self.global_step)
        self.optimizer.zero_grad(set_to_none=True)

    def train_step(self, x, y):
        """One step on a batch already on the device; the loss (detached, not synchronized)."""
        m = self.marker
        with m.phase("forward"):
            loss = self._forward_loss(x, y)
        with m.phase("backward"):
            self._backward(loss)
        with m.phase("optimizer"):
            self._optimizer_step()
        return loss.detach()

    def step_on(self, batch_fn):
        """One whole step: `batch_fn()` (host batch → device tensors) under "data", then train."""
        with self.marker.step():
            with self.marker.phase("data"):
                x, y = batch_fn()
            return self.train_step(x, y)

    def set_lr(self, lr: float) -> None:
        for g in self.optimizer.param_groups:
            g["lr"] = lr

    # -- evaluation ---------------------------------------------------------------------
    def eval_logits(self, x):
        """Logits in eval mode, under inference_mode and the precision's autocast."""
        from jouleprof.workloads.video.precision import autocast

        was = self.model.training
        self.model.eval()
        try:
            with self._torch.inference_mode(), autocast(self.precision, self.device):
                return self.model(x).float()
        finally:
            self.model.train(was)

    # -- replays (isolation) ------------------------------------------------------------
    def replays(self, x, y) -> dict[str, Any]:
        """Each phase alone on one batch, for the isolation method."""
        torch = self._torch

        def forward():
            with torch.no_grad():
                self._forward_loss(x, y)

        def forward_backward():
            self._backward(self._forward_loss(x, y))
            self.optimizer.zero_grad(set_to_none=True)

        def optimizer():
            # Gradients kept from one backward, so the step does real work each time.
            if not self._kept_grads:
                self._backward(self._forward_loss(x, y))
                self._kept_grads = [
                    (p, p.grad.detach().clone())
                    for p in self.model.parameters()
                    if p.grad is not None
                ]
            for p, g in self._kept_grads:
                p.grad = g.clone()
            (self.optimizer.step() if self.scaler is None else self.scaler.step(self.optimizer))
            if self.scaler is not None:
                self.scaler.update()
            self.optimizer.zero_grad(set_to_none=True)

        self._kept_grads: list = []
        return {
            "forward": forward,
            "forward+backward": forward_backward,
            "optimizer": optimizer,
            "forward+backward+optimizer": lambda: self.train_step(x, y),
        }

    def facts(self) -> dict[str, Any]:
        from jouleprof.workloads.video.adapt import parameter_counts

        frames, size = self.cfg.clip
        return {
            "parameters": parameter_counts(self.model),
            "init": self.classifier.init,
            "model": self.cfg.model,
            "method": self.cfg.method,
            "precision": self.cfg.precision,
            "quantized_base": getattr(self.classifier, "quant", None),
            "checkpointing": self.cfg.checkpointing,
            "clip": {"frames": frames, "size": size},
            "optimizer_impl": self.optimizer_impl,
            "loss_scaling": self.scaler is not None,
        }
