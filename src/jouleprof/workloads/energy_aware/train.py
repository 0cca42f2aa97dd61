"""Training with L = L_CE + λ·E and evaluation, for one energy-aware cell (device-resident data).

The datasets are small, so they live on the device as whole tensors and batches are index
slices: no data loader, no host work between steps. Every λ — 0 included — builds the penalty
and back-propagates through it, so all λ of a cell's architecture run the same kernels; only the
values differ. Host syncs happen once per epoch, not per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TrainResult:
    """What training and evaluation found (plain numbers; the cell turns them into figures)."""

    steps: int = 0
    samples: int = 0
    epoch_loss: list[float] = field(default_factory=list)
    epoch_ce: list[float] = field(default_factory=list)
    epoch_energy: list[float] = field(default_factory=list)
    """Reported E per sample, mean over each epoch's training batches."""
    train_sparsity: float | None = None
    test_accuracy: float | None = None
    test_energy: float | None = None
    """Reported E per sample on the test set (hooks on, no gradient)."""
    test_sparsity: float | None = None
    infer_samples: int = 0


def device_tensors(data: Any, device: Any) -> dict[str, Any]:
    import torch

    return {
        "x_train": torch.as_tensor(data.x_train, device=device),
        "y_train": torch.as_tensor(data.y_train, device=device),
        "x_test": torch.as_tensor(data.x_test, device=device),
        "y_test": torch.as_tensor(data.y_test, device=device),
    }


def _autocast(device: Any, precision: str):
    import contextlib

    import torch

    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def train(
    model: Any,
    reg: Any,
    opt: Any,
    tensors: dict[str, Any],
    *,
    epochs: int,
    batch_size: int,
    seed: int,
    precision: str = "fp32",
    max_steps: int | None = None,
    result: TrainResult | None = None,
) -> TrainResult:
    """Train `epochs` passes over the training set (or stop after `max_steps`)."""
    import torch
    import torch.nn.functional as F

    res = result or TrainResult()
    x, y = tensors["x_train"], tensors["y_train"]
    n = len(x)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    model.train()
    reg.enabled = True
    for _ in range(epochs):
        order = torch.randperm(n, generator=gen).to(x.device)
        tot_loss = torch.zeros((), device=x.device)
        tot_ce = torch.zeros((), device=x.device)
        tot_e = torch.zeros((), device=x.device)
        k = 0
        for i in range(0, n, batch_size):
            idx = order[i : i + batch_size]
            reg.reset()
            with _autocast(x.device, precision):
                logits = model(x[idx])
                ce = F.cross_entropy(logits.float(), y[idx])
                loss = ce + reg.penalty().float()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            reg.advance()
            tot_loss += loss.detach()
            tot_ce += ce.detach()
            tot_e += reg.reported_energy_tensor().float()
            k += 1
            res.steps += 1
            res.samples += len(idx)
            if max_steps is not None and res.steps >= max_steps:
                break
        res.epoch_loss.append(float(tot_loss) / k)
        res.epoch_ce.append(float(tot_ce) / k)
        res.epoch_energy.append(float(tot_e) / k)
        if max_steps is not None and res.steps >= max_steps:
            break
    res.train_sparsity = reg.take_sparsity()
    return res


def evaluate(
    model: Any, reg: Any, tensors: dict[str, Any], batch_size: int, precision: str, res: TrainResult
) -> TrainResult:
    """Test accuracy and reported E on the test set (hooks on)."""
    import torch

    x, y = tensors["x_test"], tensors["y_test"]
    model.eval()
    reg.enabled = True
    reg.take_sparsity()
    correct = torch.zeros((), device=x.device)
    e_sum = torch.zeros((), device=x.device)
    with torch.no_grad(), _autocast(x.device, precision):
        for i in range(0, len(x), batch_size):
            reg.reset()
            xb = x[i : i + batch_size]
            correct += (model(xb).argmax(dim=1) == y[i : i + batch_size]).sum()
            e_sum += reg.reported_energy_tensor().float() * len(xb)
    res.test_accuracy = float(correct) / len(x)
    res.test_energy = float(e_sum) / len(x)
    res.test_sparsity = reg.take_sparsity()
    return res


def infer(
    model: Any, reg: Any, tensors: dict[str, Any], batch_size: int, precision: str, passes: int
) -> int:
    """`passes` forward passes over the test set as deployed: hooks off, no gradient. Returns
    the samples inferred."""
    import torch

    x = tensors["x_test"]
    model.eval()
    reg.enabled = False
    n = 0
    with torch.no_grad(), _autocast(x.device, precision):
        for _ in range(passes):
            for i in range(0, len(x), batch_size):
                model(x[i : i + batch_size])
                n += len(x[i : i + batch_size])
    reg.enabled = True
    return n
