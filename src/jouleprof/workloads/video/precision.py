"""Training precisions of the video classifiers, and which method × precision pairs exist.

- fp32: no autocast (PyTorch's default matmul precision).
- fp16: autocast to float16, with loss scaling (`torch.amp.GradScaler`); weights stay fp32.
- bf16: autocast to bfloat16; no loss scaling.
- int8: a frozen 8-bit base — every Linear of the backbone (the head excepted) becomes a
  bitsandbytes LLM.int8 layer (`Linear8bitLt`, threshold 6.0) — with float16 autocast and loss
  scaling for the rest (the int8 kernels compute in float16). Needs bitsandbytes and CUDA.

Refused pairs (before any GPU work): full × int8 (full fine-tuning updates every weight, and an
8-bit base is frozen) and qlora × int8 (QLoRA's base is 4-bit NF4; its precision names the
compute dtype of that base and the rest of the model).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Precision:
    """How a training step computes."""

    name: str
    """fp32, fp16, bf16 or int8."""
    autocast_dtype: str | None
    """torch dtype name autocast runs in ("float16", "bfloat16"), None: no autocast."""
    loss_scaling: bool
    """Whether the loss is scaled (GradScaler) against float16 gradient underflow."""
    base_bits: int | None
    """8: the backbone's Linear layers are frozen 8-bit (LLM.int8); None: as the method says."""


_PRECISIONS = {
    p.name: p
    for p in (
        Precision("fp32", None, False, None),
        Precision("fp16", "float16", True, None),
        Precision("bf16", "bfloat16", False, None),
        Precision("int8", "bfloat16", False, 8),
    )
}
PRECISIONS: tuple[str, ...] = tuple(_PRECISIONS)

_REFUSED = {
    ("full", "int8"): "full fine-tuning updates every weight, and an int8 base is frozen: use "
    "lora, adalora or bitfit with int8, or full with fp32/fp16/bf16",
    ("qlora", "int8"): "qlora quantizes the base to 4-bit NF4 and its precision is the compute "
    "dtype (fp32, fp16 or bf16); for an 8-bit base use lora with int8",
}


def get_precision(name: str) -> Precision:
    """The precision `name`; ValueError listing the valid ones."""
    try:
        return _PRECISIONS[name]
    except KeyError:
        raise ValueError(
            f"unknown precision {name!r}: choose one of {', '.join(PRECISIONS)}"
        ) from None


def refusal(method: str, precision: str) -> str | None:
    """Why the pair cannot train, or None where it can (names are checked first)."""
    from jouleprof.workloads.video.adapt import METHODS

    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}: choose one of {', '.join(METHODS)}")
    get_precision(precision)
    return _REFUSED.get((method, precision))


def check_pair(method: str, precision: str) -> None:
    """ValueError with the reason where `method` cannot train at `precision`."""
    why = refusal(method, precision)
    if why is not None:
        raise ValueError(f"method {method!r} × precision {precision!r} is not supported: {why}")


def needs_bitsandbytes(method: str, precision: str) -> bool:
    return method == "qlora" or get_precision(precision).base_bits is not None


def quant_available() -> tuple[bool, str]:
    """Whether 4/8-bit bases can be built here: (ok, reason when not).

    bitsandbytes (≥ 0.46) also quantizes on the CPU, which the tests use; the timed cells need
    a CUDA GPU.
    """
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        return False, "bitsandbytes is not installed: pip install 'jouleprof[quant]'"
    return True, ""


def autocast(prec: Precision | str, device: Any) -> AbstractContextManager:
    """The autocast context of a forward pass at `prec` on `device`."""
    import torch

    p = get_precision(prec) if isinstance(prec, str) else prec
    if p.autocast_dtype is None:
        return nullcontext()
    dev_type = getattr(device, "type", str(device))
    return torch.autocast(dev_type, dtype=getattr(torch, p.autocast_dtype))


def grad_scaler(prec: Precision | str, device: Any):
    """A GradScaler where `prec` scales the loss, else None."""
    import torch

    p = get_precision(prec) if isinstance(prec, str) else prec
    if not p.loss_scaling:
        return None
    return torch.amp.GradScaler(getattr(device, "type", str(device)))


def compute_dtype(prec: Precision | str):
    """The dtype a quantized base computes in: the autocast dtype, else float32."""
    import torch

    p = get_precision(prec) if isinstance(prec, str) else prec
    return getattr(torch, p.autocast_dtype) if p.autocast_dtype else torch.float32
