"""The energy-aware models as registry workloads: `jouleprof profile ea-mlp|ea-cnn|ea-vit`.

Each trains one architecture family with L = L_CE + λ·E on one dataset, one step at a time,
marking the phases data / forward (model and penalty) / backward / optimizer through the cell's
PhaseMarker. Presets are the family's entries of `models.ARCHS` (e.g. ea-vit: vit-tiny,
vit-small); overrides set the `EnergyAwareConfig` fields (lam, kind, dataset, width, depth, ...).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from jouleprof.timeline.markers import NullRecorder, PhaseMarker
from jouleprof.workloads.energy_aware.choices import check_choices
from jouleprof.workloads.energy_aware.models import ARCH_FIELDS, ARCHS, arch_config


@dataclass(frozen=True)
class EnergyAwareConfig:
    """One energy-aware training workload."""

    arch: str = "mlp"
    """Architecture preset (models.ARCHS)."""
    dataset: str = "synthetic"
    """Dataset (datasets.DATASETS); local ones need data_dir."""
    batch_size: int = 256
    lam: float = 1e-3
    """Penalty weight λ ≥ 0."""
    kind: str = "l1"
    """What E counts (l1, l2, nonzero-macs)."""
    reduction: str = "sum"
    """E summed per sample (sum) or per hooked element (mean)."""
    lr: float = 1e-3
    precision: str = "fp32"
    """fp32 or bf16 (autocast)."""
    seed: int = 0
    data_dir: str | None = None
    data_n: int | None = None
    data_side: int | None = None
    arch_overrides: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_choices(self)
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be ≥ 1, got {self.batch_size}")
        arch_config(self.arch, **self.arch_overrides)  # checks the overrides


class EnergyAwareWorkload:
    """Registry face of one architecture family (subclasses set `family`)."""

    family = "mlp"
    name = "ea-mlp"

    def config(self, preset, batch_size, num_workers, overrides) -> EnergyAwareConfig:
        presets = [n for n, a in ARCHS.items() if a.family == self.family]
        if preset in ("tiny", "default"):
            preset = presets[0]
        if preset not in presets:
            raise ValueError(f"unknown preset {preset!r} for {self.name}: choose one of {presets}")
        own = {f.name for f in fields(EnergyAwareConfig)}
        kw = {k: v for k, v in overrides.items() if k in own}
        arch_kw = {k: v for k, v in overrides.items() if k in ARCH_FIELDS}
        bad = sorted(set(overrides) - set(kw) - set(arch_kw))
        if bad:
            raise ValueError(
                f"unknown option(s) {bad} for {self.name}: valid are "
                f"{', '.join(sorted(own | set(ARCH_FIELDS)))}"
            )
        if batch_size is not None:
            kw["batch_size"] = batch_size
        kw["arch_overrides"] = {**kw.get("arch_overrides", {}), **arch_kw}
        return EnergyAwareConfig(arch=preset, **kw)

    def describe(self, config: EnergyAwareConfig) -> dict[str, Any]:
        return asdict(config)

    def device(self):
        import torch

        return torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def gpus(self) -> tuple[int, ...] | None:
        return (0,) if self.device().type == "cuda" else None

    def session(self, config: EnergyAwareConfig, marker: PhaseMarker, data: str):
        if data not in ("fake", config.dataset):
            raise ValueError(
                f"{self.name} takes its data from the config's dataset ({config.dataset!r}): "
                "pass --set dataset=NAME and data 'fake'"
            )
        return EnergyAwareSession(config, self.device(), marker)

    def is_oom(self, exc: BaseException) -> bool:
        import torch

        return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc)


class MlpWorkload(EnergyAwareWorkload):
    family, name = "mlp", "ea-mlp"


class CnnWorkload(EnergyAwareWorkload):
    family, name = "cnn", "ea-cnn"


class VitWorkload(EnergyAwareWorkload):
    family, name = "vit", "ea-vit"


class EnergyAwareSession:
    """Trains one energy-aware model step by step (the registry's Session protocol)."""

    def __init__(self, cfg: EnergyAwareConfig, device, marker: PhaseMarker | None = None) -> None:
        import torch

        from jouleprof.energy_aware.regularizer import EnergyRegularizer
        from jouleprof.workloads.energy_aware.datasets import load_dataset
        from jouleprof.workloads.energy_aware.models import build_model, parameter_count
        from jouleprof.workloads.energy_aware.train import device_tensors

        self._torch, self.cfg, self.device = torch, cfg, device
        self.marker = marker or NullRecorder()
        t0 = time.perf_counter()
        data = load_dataset(cfg.dataset, cfg.data_dir, cfg.data_n, cfg.data_side)
        self.tensors = device_tensors(data, device)
        torch.manual_seed(cfg.seed)
        acfg = arch_config(cfg.arch, **cfg.arch_overrides)
        self.model = build_model(acfg, data.in_shape, data.n_classes).to(device)
        self.n_params = parameter_count(self.model)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr)
        self.reg = EnergyRegularizer(
            self.model, kind=cfg.kind, schedule=cfg.lam, reduction=cfg.reduction
        )
        self._gen = torch.Generator(device="cpu").manual_seed(cfg.seed)
        self.samples_per_step = cfg.batch_size
        self.in_shape = data.in_shape
        n = len(self.tensors["x_train"])
        self._fixed = torch.arange(min(cfg.batch_size, n), device=device)
        self.setup_timing_s = {"build": round(time.perf_counter() - t0, 3)}

    def _autocast(self):
        import contextlib

        if self.cfg.precision != "bf16":
            return contextlib.nullcontext()
        return self._torch.autocast(self.device.type, dtype=self._torch.bfloat16)

    def _batch(self, fixed: bool):
        if fixed:
            idx = self._fixed
        else:
            n = len(self.tensors["x_train"])
            idx = self._torch.randint(0, n, (self.cfg.batch_size,), generator=self._gen)
            idx = idx.to(self.device)
        return self.tensors["x_train"][idx], self.tensors["y_train"][idx]

    def _loss(self, x, y):
        import torch.nn.functional as F

        self.reg.reset()
        with self._autocast():
            logits = self.model(x)
            return F.cross_entropy(logits.float(), y) + self.reg.penalty().float()

    def sync(self) -> None:
        if self.device.type == "cuda":
            self._torch.cuda.synchronize(self.device)

    def step(self, sync: bool, fixed: bool = False) -> float:
        t0 = time.perf_counter()
        m = self.marker
        with m.step():
            with m.phase("data"):
                x, y = self._batch(fixed)
            with m.phase("forward"):
                loss = self._loss(x, y)
            with m.phase("backward"):
                loss.backward()
            with m.phase("optimizer"):
                self.opt.step()
                self.opt.zero_grad(set_to_none=True)
                self.reg.advance()
        if sync:
            self.sync()
        return time.perf_counter() - t0

    def replays(self) -> dict[str, Callable[[], Any]]:
        x, y = self._batch(True)

        def fwd():
            with self._torch.no_grad():
                self._loss(x, y)

        def fwd_bwd():
            self._loss(x, y).backward()
            self.opt.zero_grad(set_to_none=True)

        def fwd_bwd_opt():
            self._loss(x, y).backward()
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)

        return {
            "forward": fwd,
            "forward+backward": fwd_bwd,
            "forward+backward+optimizer": fwd_bwd_opt,
        }

    def facts(self) -> dict[str, Any]:
        """Parameters and FLOPs per training sample, counted by torch's FlopCounterMode on one
        forward and backward of the fixed batch (penalty included)."""
        from torch.utils.flop_counter import FlopCounterMode

        x, y = self._batch(True)
        try:
            with FlopCounterMode(display=False) as fc:
                self._loss(x, y).backward()
            self.opt.zero_grad(set_to_none=True)
            flops = {
                "forward_backward_flops": fc.get_total_flops() / len(x),
                "method": "torch.utils.flop_counter.FlopCounterMode",
            }
        except Exception as e:  # a count we cannot make is said, not guessed
            flops = {"value": None, "reason": f"{type(e).__name__}: {e}"}
        return {
            "parameters": {"total": self.n_params},
            "flops_per_sample": flops,
            "regularizer": {
                "kind": self.cfg.kind,
                "lam": self.cfg.lam,
                "layers": list(self.reg.layers),
            },
        }

    def peak_memory_bytes(self) -> int | None:
        if self.device.type != "cuda":
            return None
        return int(self._torch.cuda.max_memory_allocated(self.device))

    def close(self) -> None:
        self.reg.detach()
        self.model = self.opt = self.tensors = None
