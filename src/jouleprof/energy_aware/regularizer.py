"""An internal activation energy E(θ, x), collected through forward hooks, and its penalty λ·E.

`EnergyRegularizer(model, kind=..., layers=...)` hooks the *inputs* of the model's weight layers
(nn.Linear and nn.Conv1d/2d/3d). Those tensors are what the layers' multiply-accumulates consume,
so they are where activation sparsity could save work. By default every weight layer is hooked
except the first one in the model's module order, which consumes the data, not the model's own
activations.

What E counts, per kind (always the mean over the batch of a per-sample sum over every hooked
tensor's elements and over every hooked layer, so E does not depend on the batch size):

- ``"l1"``: E = Σ_layers Σ_elements |a|. Unit: activation units (the activations' own scale).
  Penalized and reported are the same quantity.
- ``"l2"``: E = Σ_layers Σ_elements a². Unit: activation units squared. Penalized = reported.
- ``"nonzero-macs"``: reported E = the multiply-accumulates a zero-skipping kernel would execute:
  for a Linear layer, (nonzero inputs) × out_features; for a convolution, every
  (output position, kernel tap, output channel) whose input element is nonzero, counted exactly
  through the layer's own stride, padding, dilation and groups. Unit: MACs per sample. A count is
  piecewise constant (its gradient is zero almost everywhere), so training penalizes a
  differentiable surrogate instead: the same sum with 1[a ≠ 0] replaced by |a| — each input
  element's |a| weighted by the MACs it takes part in (its fan-out). Unit: MAC × activation
  units. `energy()` returns the surrogate (the penalized tensor), `reported_energy()` the count.

With ``reduction="mean"`` each kind is divided by what it would be if every hooked element were
1 (l1, l2: the number of hooked elements per sample; nonzero-macs: the dense MACs per sample), so
E is a mean per element — for nonzero-macs the fraction of the dense MACs a zero-skipping kernel
would execute — and does not grow with the model. The default, ``"sum"``, is what the study
measures; with it λ's scale depends on the model's size (a λ of 1e-3 already outweighs the
cross-entropy of the study's models).

The penalty of a step is λ(step) · E, with λ from a `LambdaSchedule`. The regularizer works in
any training loop: call `reset()` before a forward, add `penalty()` to the loss after it, and
`advance()` once per optimizer step.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

KINDS = ("l1", "l2", "nonzero-macs")
REDUCTIONS = ("sum", "mean")
SCHEDULES = ("constant", "linear-warmup")


@dataclass(frozen=True)
class LambdaSchedule:
    """λ as a function of the optimizer step."""

    lam: float = 0.0
    """The penalty weight λ once warmed up (≥ 0; 0 switches the penalty off)."""
    kind: str = "constant"
    """"constant" (λ from the first step) or "linear-warmup" (0 → λ over warmup_steps)."""
    warmup_steps: int = 0
    """Steps of the linear warm-up (kind "linear-warmup" only)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lam) and self.lam >= 0):
            raise ValueError(f"lam (λ) must be a finite number ≥ 0, got {self.lam}")
        if self.kind not in SCHEDULES:
            raise ValueError(f"unknown schedule kind {self.kind!r}: choose one of {SCHEDULES}")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be ≥ 0, got {self.warmup_steps}")
        if self.kind == "linear-warmup" and self.warmup_steps == 0:
            raise ValueError("kind 'linear-warmup' needs warmup_steps ≥ 1")

    def value(self, step: int) -> float:
        """λ at optimizer step `step` (0-based)."""
        if self.kind == "linear-warmup" and step < self.warmup_steps:
            return self.lam * (step + 1) / self.warmup_steps
        return self.lam


def _weight_layer_types():
    import torch.nn as nn

    return (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


def default_layers(model: Any) -> list[str]:
    """Names of every weight layer of `model` but the first in module order (it reads the data)."""
    names = [n for n, m in model.named_modules() if isinstance(m, _weight_layer_types())]
    return names[1:]


def _conv_macs_per_nonzero(module: Any, x: Any) -> Any:
    """Exact MACs a zero-skipping convolution executes for input `x` (B, C, *spatial), per sample.

    Each output channel of a group reads every input channel of that group through every kernel
    tap: a tap at an output position does a MAC where its input element is nonzero. Counting the
    nonzero inputs each output position sees (a convolution of the nonzero mask with a ones
    kernel, per group) times the group's output channels is the exact count.
    """
    import torch
    import torch.nn.functional as F

    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[x.dim() - 2]
    g = module.groups
    b, c = x.shape[:2]
    mask = (x != 0).to(x.dtype).reshape(b, g, c // g, *x.shape[2:]).sum(dim=2)
    ones = torch.ones((g, 1, *module.kernel_size), dtype=x.dtype, device=x.device)
    counts = conv(mask, ones, None, module.stride, _numeric_padding(module), module.dilation, g)
    per_group_out = module.out_channels // g
    return counts.reshape(b, -1).sum(dim=1) * per_group_out


def _numeric_padding(module: Any) -> Any:
    """The conv's zero padding as numbers; other padding is refused (it is not a zero border)."""
    if module.padding_mode != "zeros":
        raise ValueError(
            "nonzero-macs counts zero padding only; a layer has padding_mode "
            f"{module.padding_mode!r}"
        )
    if module.padding == "valid":
        return 0
    if isinstance(module.padding, str):
        raise ValueError("nonzero-macs needs numeric conv padding; a layer has padding='same'")
    return module.padding


def _fanout_weights(module: Any, x: Any) -> Any:
    """MACs each input element of `x` takes part in (same shape as one sample of x)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    if isinstance(module, nn.Linear):
        return torch.full(x.shape[1:], float(module.out_features), dtype=x.dtype, device=x.device)
    # The transpose of the ones-kernel convolution spreads each output position's taps back
    # onto the inputs it read: an input's count of (position, tap) pairs.
    tconv = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[x.dim() - 2]
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[x.dim() - 2]
    g = module.groups
    probe = torch.ones((1, g, *x.shape[2:]), dtype=x.dtype, device=x.device)
    ones = torch.ones((g, 1, *module.kernel_size), dtype=x.dtype, device=x.device)
    pad = _numeric_padding(module)
    out = conv(probe, ones, None, module.stride, pad, module.dilation, g)
    spread = tconv(torch.ones_like(out), ones, None, module.stride, pad, 0, g, module.dilation)
    spread = spread[(0, slice(None), *(slice(0, s) for s in x.shape[2:]))]
    if tuple(spread.shape[1:]) != tuple(x.shape[2:]):  # output_padding cut a border row off
        full = torch.zeros((g, *x.shape[2:]), dtype=x.dtype, device=x.device)
        sl = tuple(slice(0, s) for s in spread.shape[1:])
        full[(slice(None), *sl)] = spread
        spread = full
    per_channel = spread.repeat_interleave(x.shape[1] // g, dim=0)  # (C, *spatial)
    return per_channel * (module.out_channels // g)


class EnergyRegularizer:
    """Collects an internal activation energy E through forward hooks (see the module docstring).

    Args:
        model: a torch.nn.Module.
        kind: "l1", "l2" or "nonzero-macs".
        layers: names of weight layers to hook (as in `model.named_modules()`); None: every
            nn.Linear / nn.Conv*d but the first in module order.
        schedule: the λ schedule; a float is a constant λ.
        reduction: "sum" (per-sample sum) or "mean" (per hooked element; see the module
            docstring).
    """

    def __init__(
        self,
        model: Any,
        kind: str = "l1",
        layers: Sequence[str] | None = None,
        schedule: LambdaSchedule | float = 0.0,
        reduction: str = "sum",
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}: choose one of {', '.join(KINDS)}")
        if reduction not in REDUCTIONS:
            raise ValueError(
                f"unknown reduction {reduction!r}: choose one of {', '.join(REDUCTIONS)}"
            )
        self.reduction = reduction
        self.model = model
        self.kind = kind
        self.schedule = (
            schedule if isinstance(schedule, LambdaSchedule) else LambdaSchedule(schedule)
        )
        modules = dict(model.named_modules())
        chosen = default_layers(model) if layers is None else list(layers)
        unknown = [n for n in chosen if n not in modules]
        if unknown:
            raise ValueError(
                f"layers {unknown} are not modules of the model; weight layers are: "
                + ", ".join(n for n, m in modules.items() if isinstance(m, _weight_layer_types()))
            )
        wrong = [n for n in chosen if not isinstance(modules[n], _weight_layer_types())]
        if wrong:
            raise ValueError(f"layers {wrong} are not nn.Linear or nn.Conv1d/2d/3d")
        if not chosen:
            raise ValueError("no layer to hook: the model has fewer than two weight layers")
        self.layers: tuple[str, ...] = tuple(chosen)
        self.step = 0
        self._handles: list[Any] = []
        self._terms: list[Any] = []  # per forward call of a hooked layer: (B,) differentiable
        self._reported: list[Any] = []  # per forward call: (B,) detached report
        self._dense: list[float] = []  # per forward call: the term's value were all inputs 1
        self._zeros = 0
        self._elements = 0
        self._fanout_cache: dict[tuple, Any] = {}
        self.enabled = True
        self.attach()

    # -- hooks ----------------------------------------------------------------------------------

    def attach(self) -> None:
        """Register the forward-pre hooks (done by the constructor)."""
        if self._handles:
            return
        modules = dict(self.model.named_modules())
        for name in self.layers:
            self._handles.append(modules[name].register_forward_pre_hook(self._hook))

    def detach(self) -> None:
        """Remove the hooks; the model runs as if never hooked."""
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def __enter__(self) -> EnergyRegularizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    def _hook(self, module: Any, inputs: tuple) -> None:
        if not self.enabled:
            return
        x = inputs[0]
        b = x.shape[0] if x.dim() > 1 else 1
        flat = x.reshape(b, -1) if x.dim() > 1 else x.reshape(1, -1)
        import torch

        with torch.no_grad():  # kept on the device: no host sync per step
            self._zeros = self._zeros + (flat == 0).sum()
            self._elements += flat.numel()
        if self.kind == "l1":
            term = flat.abs().sum(dim=1)
            self._terms.append(term)
            self._reported.append(term.detach())
            self._dense.append(float(flat.shape[1]))
        elif self.kind == "l2":
            term = flat.pow(2).sum(dim=1)
            self._terms.append(term)
            self._reported.append(term.detach())
            self._dense.append(float(flat.shape[1]))
        else:
            w = self._fanout(module, x)
            self._terms.append((x.abs() * w).reshape(b, -1).sum(dim=1))
            self._dense.append(self._dense_macs(module, x, w))
            with torch.no_grad():
                if isinstance(module, _weight_layer_types()[0]):  # Linear: any leading dims
                    nz = (x != 0).reshape(b, -1).sum(dim=1).to(x.dtype)
                    self._reported.append(nz * module.out_features)
                else:
                    self._reported.append(_conv_macs_per_nonzero(module, x.detach()))

    def _dense_macs(self, module: Any, x: Any, w: Any) -> float:
        """MACs per sample of the layer on dense input (cached with the fan-out weights)."""
        key = ("dense", id(module), tuple(x.shape[1:]))
        v = self._fanout_cache.get(key)
        if v is None:
            v = float(w.sum())  # w holds one sample's fan-out per element
            self._fanout_cache[key] = v
        return v

    def _fanout(self, module: Any, x: Any) -> Any:
        key = (id(module), tuple(x.shape[1:]), x.dtype, x.device)
        w = self._fanout_cache.get(key)
        if w is None:
            import torch

            with torch.no_grad():
                w = _fanout_weights(module, x)
            self._fanout_cache[key] = w
        return w

    # -- the loop's calls -------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget what the hooks collected (call before each step's forward)."""
        self._terms.clear()
        self._reported.clear()
        self._dense.clear()

    def _reduce(self, terms: list[Any]) -> Any:
        e = _mean_of_sums(terms)  # Σ over calls of the per-sample mean
        if self.reduction == "mean":
            e = e / sum(self._dense)  # Σ over calls of the per-sample dense value
        return e

    def energy(self) -> Any:
        """E of the forwards since `reset()`: a differentiable scalar tensor, mean per sample
        (for nonzero-macs the surrogate). Raises if nothing was collected."""
        if not self._terms:
            raise RuntimeError(
                "the regularizer collected nothing: call reset() and then run the model's "
                "forward (with the hooks attached) before energy()"
            )
        return self._reduce(self._terms)

    def reported_energy(self) -> float:
        """The reported E (see the module docstring) of the forwards since `reset()`, per sample."""
        return float(self.reported_energy_tensor())

    def reported_energy_tensor(self) -> Any:
        """As `reported_energy`, as a detached tensor on the model's device (no host sync)."""
        if not self._reported:
            raise RuntimeError("the regularizer collected nothing since reset()")
        return self._reduce(self._reported)

    @property
    def lam(self) -> float:
        """λ at the current step."""
        return self.schedule.value(self.step)

    def penalty(self) -> Any:
        """λ(step) · E: add it to the loss. Built even at λ = 0, so every λ runs the same work."""
        return self.energy() * self.lam

    def advance(self) -> None:
        """One optimizer step done: move the λ schedule on."""
        self.step += 1

    def take_sparsity(self) -> float | None:
        """Fraction of exactly-zero hooked activation elements since the last call; None if none
        were seen."""
        z, n = self._zeros, self._elements
        self._zeros = self._elements = 0
        return float(z) / n if n else None

    @property
    def unit(self) -> str:
        """Unit of the reported E."""
        if self.reduction == "mean":
            return {"l1": "activation/element", "l2": "activation^2/element",
                    "nonzero-macs": "fraction of dense MACs"}[self.kind]  # fmt: skip
        return {"l1": "activation", "l2": "activation^2", "nonzero-macs": "MAC"}[self.kind]


def _mean_of_sums(terms: Iterable[Any]) -> Any:
    """Per-layer (B,) terms → mean over the batch of their per-sample sum.

    A layer called several times in one forward adds one term per call; terms of different batch
    sizes (a layer fed a reshaped batch) are reduced to their mean first.
    """
    import torch

    terms = list(terms)
    sizes = {t.shape[0] for t in terms}
    if len(sizes) == 1:
        return torch.stack(terms).sum(dim=0).mean()
    return sum(t.mean() for t in terms)
