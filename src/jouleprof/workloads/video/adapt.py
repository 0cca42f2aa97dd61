"""Fine-tuning methods of the video classifiers: which parameters train, and how.

- full: every parameter trains.
- lora: LoRA adapters (PEFT) on the model's attention projections (`ModelSpec.lora_targets`: a
  fused qkv projection adapts q, k and v together; separate query/value projections are adapted
  where the model has them), plus the classifier head.
- qlora: the same adapters on a frozen 4-bit NF4 base (bitsandbytes), plus the head.
- adalora: AdaLoRA adapters (PEFT: SVD-form, ranks re-allocated during training), plus the head;
  its orthogonal regularization comes from `extra_loss`, its rank allocation from `after_step`.
- bitfit: biases and the classifier head only.

The classifier head always trains; everything else of the base is frozen unless the method says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

METHODS: tuple[str, ...] = ("full", "lora", "qlora", "adalora", "bitfit")


@dataclass(frozen=True)
class AdaptConfig:
    """Hyper-parameters of the adapter methods."""

    lora_r: int = 16
    """LoRA rank (lora, qlora)."""
    lora_alpha: int = 32
    """LoRA scaling numerator (the update is scaled by alpha / r)."""
    lora_dropout: float = 0.0
    """Dropout on the adapters' input."""
    adalora_init_r: int = 12
    """AdaLoRA's initial rank per adapted matrix."""
    adalora_target_r: int = 8
    """AdaLoRA's average rank after allocation."""
    adalora_orth_reg: float = 0.5
    """Weight of AdaLoRA's orthogonal regularization in the loss."""
    total_steps: int = 1000
    """Optimizer steps of the run (AdaLoRA's budget schedule needs it)."""

    def __post_init__(self) -> None:
        for f in ("lora_r", "lora_alpha", "adalora_init_r", "adalora_target_r", "total_steps"):
            if getattr(self, f) < 1:
                raise ValueError(f"{f} must be ≥ 1, got {getattr(self, f)}")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout}")
        if self.adalora_target_r > self.adalora_init_r:
            raise ValueError("adalora_target_r must be ≤ adalora_init_r")


def check_method(method: str) -> None:
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}: choose one of {', '.join(METHODS)}")


def unwrap(model):
    """The `VideoClassifier` inside a PEFT wrapper (or the model itself)."""
    from jouleprof.workloads.video.classifier import VideoClassifier

    m = model
    for _ in range(4):
        if isinstance(m, VideoClassifier):
            return m
        m = getattr(m, "base_model", None) if not hasattr(m, "model") else m.model
        if m is None:
            break
    raise TypeError(f"not a VideoClassifier or a PEFT wrapper of one: {type(model).__name__}")


def _head_prefix(vc) -> str:
    return f"net.{vc.head_name}"


def adapt(model, method: str, precision: str, cfg: AdaptConfig | None = None, device: Any = None):
    """Apply `method` at `precision` to a freshly built `VideoClassifier`; returns the model to
    train (a PEFT model for lora/qlora/adalora), on `device`.

    Quantized bases (qlora: NF4; int8 precision: LLM.int8) are built here, quantized as the
    model moves to `device`.

    Raises:
        ValueError: unknown names, or a refused method × precision pair (with the reason).
        JouleprofError: bitsandbytes missing for a quantized base.
    """
    import torch

    from jouleprof.workloads.video.precision import check_pair, compute_dtype, get_precision
    from jouleprof.workloads.video.quant import quantize_linears

    check_method(method)
    check_pair(method, precision)
    cfg = cfg or AdaptConfig()
    prec = get_precision(precision)
    vc = model
    head = vc.head_name
    bits = 4 if method == "qlora" else prec.base_bits
    if bits is not None:
        vc.quant = {
            "bits": bits,
            "layers": quantize_linears(vc.net, bits, compute_dtype(prec), (head,)),
        }
    else:
        vc.quant = None
    device = torch.device(device) if device is not None else torch.device("cpu")
    vc = vc.to(device)
    if method == "full":
        for p in vc.parameters():
            p.requires_grad_(True)
        return vc
    if method == "bitfit":
        for name, p in vc.named_parameters():
            p.requires_grad_(name.endswith("bias") or name.startswith(_head_prefix(vc) + "."))
        _affine_outside_layer_norm(vc)
        return vc
    return _peft(vc, method, cfg)


def _layer_norm_bias_only(self, x):
    import torch.nn.functional as F

    y = F.layer_norm(x, self.normalized_shape, None, None, self.eps)
    return y * self.weight + self.bias


def _affine_outside_layer_norm(vc) -> int:
    """Give each LayerNorm whose bias trains but weight is frozen (BitFit) a forward that applies
    the affine outside the fused kernel: the same output, and the bias gets its gradient.

    On the H200 (torch 2.11, CUDA) the fused LayerNorm backward returned an empty bias gradient
    when only the bias required one, on inputs of ~10⁵ rows (Swin3D's and Hiera's first stages
    at 16×224, batch 4): "NativeLayerNormBackward0 returned an invalid gradient at index 2".
    """
    from torch import nn

    n = 0
    for m in vc.modules():
        if (
            isinstance(m, nn.LayerNorm)
            and m.weight is not None
            and m.bias is not None
            and m.bias.requires_grad
            and not m.weight.requires_grad
        ):
            m.forward = _layer_norm_bias_only.__get__(m)
            n += 1
    return n


def _peft(vc, method: str, cfg: AdaptConfig):
    from peft import AdaLoraConfig, LoraConfig, get_peft_model

    targets = list(vc.spec.lora_targets)
    # PEFT's AdaLoRA picks its bitsandbytes layer classes by these flags (as Hugging Face
    # models set them), not by the base layer's type as LoRA does.
    bits = (vc.quant or {}).get("bits")
    vc.is_loaded_in_8bit = bits == 8
    vc.is_loaded_in_4bit = bits == 4
    if method == "adalora":
        pc = AdaLoraConfig(
            init_r=cfg.adalora_init_r,
            target_r=cfg.adalora_target_r,
            lora_alpha=cfg.lora_alpha,
            lora_dropout=cfg.lora_dropout,
            target_modules=targets,
            total_step=cfg.total_steps,
            tinit=max(0, cfg.total_steps // 10),
            tfinal=max(0, cfg.total_steps // 5),
            orth_reg_weight=cfg.adalora_orth_reg,
        )
    else:
        pc = LoraConfig(
            r=cfg.lora_r,
            lora_alpha=cfg.lora_alpha,
            lora_dropout=cfg.lora_dropout,
            target_modules=targets,
            bias="none",
        )
    pm = get_peft_model(vc, pc)
    head = _head_prefix(vc) + "."
    for name, p in vc.named_parameters():
        if name.startswith(head):
            p.requires_grad_(True)
    n_adapted = sum(1 for _, m in vc.named_modules() if hasattr(m, "lora_A"))
    if n_adapted == 0:  # a target list that matched nothing would silently train the head only
        raise ValueError(f"{vc.spec.name}: LoRA targets {targets} matched no module")
    return pm


def trainable_parameters(model) -> list:
    return [p for p in model.parameters() if p.requires_grad]


def parameter_counts(model) -> dict[str, int]:
    """Total (unpacked: a 4-bit weight counts its logical elements) and trainable parameters."""
    from jouleprof.workloads.video.quant import logical_numel

    total = trainable = 0
    for p in model.parameters():
        n = logical_numel(p)
        total += n
        if p.requires_grad:
            trainable += n
    return {"total": total, "trainable": trainable}


def _adalora_tuner(model):
    from peft import PeftModel
    from peft.tuners.adalora import AdaLoraModel

    if isinstance(model, PeftModel) and isinstance(model.base_model, AdaLoraModel):
        return model.base_model
    return None


def extra_loss(model):
    """AdaLoRA's orthogonal regularization (weighted), to add to the task loss; None otherwise.

    PEFT adds it only to outputs with a `.loss` field, which a logits tensor is not: this is
    the same term (mean over adapted matrices of ||P Pᵀ − I||_F), computed here.
    """
    tuner = _adalora_tuner(model)
    if tuner is None:
        return None
    import torch

    name = tuner.trainable_adapter_name
    weight = tuner.peft_config[name].orth_reg_weight
    if weight <= 0:
        return None
    terms = []
    for n, p in tuner.model.named_parameters():
        if ("lora_A" in n or "lora_B" in n) and name in n and p.numel() > 0:
            cov = p @ p.T if "lora_A" in n else p.T @ p
            eye = torch.eye(*cov.shape, device=cov.device, dtype=cov.dtype)
            terms.append(torch.linalg.matrix_norm(cov - eye, ord="fro"))
    if not terms:
        return None
    return weight * torch.stack(terms).mean()


def after_step(model, global_step: int) -> None:
    """AdaLoRA's rank allocation; call after optimizer.step(), before zero_grad()."""
    tuner = _adalora_tuner(model)
    if tuner is not None:
        tuner.update_and_allocate(global_step)
