"""BERT masked-LM training: the workload of the training-energy study and its scaling law.

The measured quantity is fixed by one protocol (docs/training-energy.md): `BertForMaskedLM` from
`BertConfig(vocab 30522, hidden H, layers L, heads A, intermediate 4H, max positions
max(512, S))`, random initialization, SDPA attention; `input_ids` uniform over the vocabulary,
shape (B, S) per GPU; labels at 15 % of positions and -100 elsewhere; AdamW (lr 1e-4, fused);
bf16 autocast. `bert_protocol.run_protocol` adds the warm-up, the synced measured steps and the
energy; this module builds the model, its batches and one training step through a PhaseMarker.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from jouleprof.timeline.markers import NullRecorder, PhaseMarker

VOCAB = 30522
STRATEGIES = ("none", "ddp", "fsdp", "tp")
PRECISIONS = ("bf16", "fp32")


@dataclass(frozen=True)
class BertTrainConfig:
    """One configuration of the BERT masked-LM protocol."""

    layers: int = 12
    """Encoder layers (L)."""
    hidden: int = 768
    """Hidden size (H); the MLP's intermediate size is 4H."""
    heads: int = 12
    """Attention heads (A); H must be divisible by A."""
    seq: int = 128
    """Sequence length (S); max positions are max(512, S)."""
    batch: int = 32
    """Sequences per GPU per step (B); under tp the whole tensor-parallel group shares one batch."""
    strategy: str = "none"
    """none (one GPU), ddp, fsdp (FSDP2 fully_shard) or tp (torch.distributed.tensor.parallel)."""
    precision: str = "bf16"
    """bf16 (autocast, fp32 master weights) or fp32."""
    warmup_steps: int = 5
    """Unmeasured steps before the measured segment."""
    min_measure_s: float = 6.0
    """The measured segment lasts at least this long (synced steps)."""
    min_steps: int = 3
    """...and at least this many steps."""
    dropout: float = 0.1
    """Hidden and attention dropout (BertConfig's default); 0 makes steps deterministic."""
    mask_prob: float = 0.15
    """Share of positions that carry a label (the rest are -100)."""
    lr: float = 1e-4
    """AdamW learning rate."""
    seed: int = 0
    """Seeds the initialization and the batches (the same on every rank of a tp group)."""

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "seq", "batch", "min_steps"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer ≥ 1, got {v!r}")
        if self.hidden % self.heads:
            raise ValueError(
                f"hidden ({self.hidden}) must be divisible by heads ({self.heads}): "
                f"choose heads among {_divisors(self.hidden)[:12]}"
            )
        if self.strategy not in STRATEGIES:
            raise ValueError(
                f"strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}"
            )
        if self.precision not in PRECISIONS:
            raise ValueError(
                f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}"
            )
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be ≥ 0, got {self.warmup_steps}")
        if not self.min_measure_s >= 0:
            raise ValueError(f"min_measure_s must be ≥ 0 seconds, got {self.min_measure_s}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if not 0 < self.mask_prob <= 1:
            raise ValueError(f"mask_prob must be in (0, 1], got {self.mask_prob}")

    @property
    def intermediate(self) -> int:
        return 4 * self.hidden

    @property
    def max_positions(self) -> int:
        return max(512, self.seq)

    @property
    def shape_key(self) -> str:
        """A filesystem-safe name of the model and shape: L12-H768-A12-S128-B32."""
        return f"L{self.layers}-H{self.hidden}-A{self.heads}-S{self.seq}-B{self.batch}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BertTrainConfig:
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown BERT config fields {unknown}: valid are {sorted(names)}")
        return cls(**d)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


PRESETS: dict[str, dict[str, int]] = {
    "tiny": {"layers": 2, "hidden": 64, "heads": 4, "seq": 32, "batch": 4},
    "small": {"layers": 4, "hidden": 512, "heads": 8, "seq": 128, "batch": 32},
    "base": {"layers": 12, "hidden": 768, "heads": 12, "seq": 128, "batch": 32},
    "large": {"layers": 24, "hidden": 1024, "heads": 16, "seq": 512, "batch": 32},
}


def get_preset(name: str, **overrides: Any) -> BertTrainConfig:
    """A named configuration (tiny, small, base, large) with fields replaced by `overrides`."""
    if name not in PRESETS:
        raise ValueError(f"unknown BERT preset {name!r}: choose one of {', '.join(PRESETS)}")
    return BertTrainConfig.from_json({**PRESETS[name], **overrides})


def hf_config(cfg: BertTrainConfig):
    """The transformers BertConfig of the protocol."""
    from transformers import BertConfig

    return BertConfig(
        vocab_size=VOCAB,
        hidden_size=cfg.hidden,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        intermediate_size=cfg.intermediate,
        max_position_embeddings=cfg.max_positions,
        hidden_dropout_prob=cfg.dropout,
        attention_probs_dropout_prob=cfg.dropout,
        attn_implementation="sdpa",
    )


def build_model(cfg: BertTrainConfig, device):
    """BertForMaskedLM with random initialization, built directly on `device`."""
    import torch
    from transformers import BertForMaskedLM

    torch.manual_seed(cfg.seed)
    with torch.device(device):
        model = BertForMaskedLM(hf_config(cfg))
    model.train()
    return model


def make_batch(cfg: BertTrainConfig, device, generator) -> tuple[Any, Any]:
    """(input_ids, labels): ids uniform over the vocabulary, labels at mask_prob of positions."""
    import torch

    ids = torch.randint(0, VOCAB, (cfg.batch, cfg.seq), device=device, generator=generator)
    keep = torch.rand((cfg.batch, cfg.seq), device=device, generator=generator) < cfg.mask_prob
    labels = torch.where(keep, ids, torch.full_like(ids, -100))
    return ids, labels


def make_optimizer(model, cfg: BertTrainConfig):
    """AdamW, fused where this torch supports it for these parameters; says which it got."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    # Tensor parallelism leaves some parameters plain tensors (embeddings, LayerNorms, the head)
    # and makes the rest DTensors; one fused kernel takes one kind, so one group each.
    kinds: dict[str, list] = {}
    for p in params:
        kinds.setdefault(type(p.data).__name__, []).append(p)
    groups = [{"params": ps} for ps in kinds.values()]
    try:
        return torch.optim.AdamW(groups, lr=cfg.lr, fused=True), "fused"
    except (RuntimeError, TypeError, ValueError) as e:
        return torch.optim.AdamW(groups, lr=cfg.lr, foreach=True), f"foreach ({e})"


class BertSession:
    """A model, its optimizer and batches: trains one masked-LM step at a time.

    Implements the cell runner's Session protocol (bench.workloads): step, sync, replays, facts,
    peak_memory_bytes, close.
    """

    def __init__(
        self,
        cfg: BertTrainConfig,
        device,
        marker: PhaseMarker | None = None,
        *,
        wrap: Callable[[Any], Any] | None = None,
        data_seed: int | None = None,
    ) -> None:
        import torch

        self._torch = torch
        self.cfg = cfg
        self.device = device
        self.marker = marker or NullRecorder()
        t0 = time.perf_counter()
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        model = build_model(cfg, device)
        self.n_params = sum(p.numel() for p in model.parameters())
        self.model = wrap(model) if wrap is not None else model
        self.optimizer, self.optimizer_impl = make_optimizer(self.model, cfg)
        self._gen = torch.Generator(device=device)
        self._gen.manual_seed(cfg.seed if data_seed is None else data_seed)
        self.fixed_batch = make_batch(cfg, device, self._gen)
        self.samples_per_step = cfg.batch
        self.first_loss: float | None = None
        self.setup_timing_s = {"model_build": round(time.perf_counter() - t0, 3)}

    def _autocast(self):
        import contextlib

        if self.cfg.precision != "bf16":
            return contextlib.nullcontext()
        return self._torch.autocast(self.device.type, dtype=self._torch.bfloat16)

    def sync(self) -> None:
        if self.device.type == "cuda":
            self._torch.cuda.synchronize(self.device)

    def _forward(self, batch):
        ids, labels = batch
        with self._autocast():
            return self.model(input_ids=ids, labels=labels).loss

    def step(self, sync: bool, fixed: bool = False) -> float:
        t0 = time.perf_counter()
        m = self.marker
        with m.step():
            with m.phase("data"):
                batch = self.fixed_batch if fixed else make_batch(self.cfg, self.device, self._gen)
            with m.phase("forward"):
                loss = self._forward(batch)
            with m.phase("backward"):
                loss.backward()
            with m.phase("optimizer"):
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
        if sync:
            self.sync()
        if self.first_loss is None:  # once: a check that strategies compute the same step
            self.first_loss = float(loss.detach().float().item())
        self.last_loss = loss
        return time.perf_counter() - t0

    def replays(self) -> dict[str, Callable[[], Any]]:
        def fwd():
            with self._torch.no_grad():
                self._forward(self.fixed_batch)

        def fwd_bwd():
            self._forward(self.fixed_batch).backward()
            self.optimizer.zero_grad(set_to_none=True)

        def fwd_bwd_opt():
            self._forward(self.fixed_batch).backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)

        return {
            "forward": fwd,
            "forward+backward": fwd_bwd,
            "forward+backward+optimizer": fwd_bwd_opt,
        }

    def facts(self) -> dict[str, Any]:
        from jouleprof.predict.train_features import analytic_counts

        counts = analytic_counts(self.cfg)
        return {
            "parameters": {"total": self.n_params},
            # the convention every workload follows (cell figures read forward_backward_flops)
            "flops_per_sample": {
                "forward_flops": counts["fwd_flops"] / self.cfg.batch,
                "forward_backward_flops": counts["train_flops"] / self.cfg.batch,
                "method": "analytic (predict.train_features.analytic_counts)",
            },
            "train_flops_per_step": counts["train_flops"],
            "optimizer_impl": self.optimizer_impl,
            "first_loss": self.first_loss,
        }

    def peak_memory_bytes(self) -> int | None:
        if self.device.type != "cuda":
            return None
        return int(self._torch.cuda.max_memory_allocated(self.device))

    def close(self) -> None:
        self.model = self.optimizer = self.fixed_batch = None


class BertWorkload:
    """The registry's face of the BERT workload (bench.workloads.Workload protocol)."""

    name = "bert"

    def config(self, preset, batch_size, num_workers, overrides) -> BertTrainConfig:
        kw = dict(overrides)
        if batch_size is not None:
            kw["batch"] = batch_size
        return get_preset(preset, **kw)

    def describe(self, config: BertTrainConfig) -> dict[str, Any]:
        return config.to_json()

    def device(self):
        import torch

        return torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def gpus(self) -> tuple[int, ...] | None:
        return (0,) if self.device().type == "cuda" else None

    def session(self, config: BertTrainConfig, marker: PhaseMarker, data: str) -> BertSession:
        if data != "fake":
            raise ValueError("the BERT workload trains on synthetic token batches: use data 'fake'")
        if config.strategy != "none":
            raise ValueError(
                "the cell runner trains one process: run strategies through "
                "`python -m jouleprof.workloads.bert_protocol` under torchrun"
            )
        return BertSession(config, self.device(), marker)

    def is_oom(self, exc: BaseException) -> bool:
        return is_oom(exc)


def is_oom(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def with_fields(cfg: BertTrainConfig, **kw: Any) -> BertTrainConfig:
    return replace(cfg, **kw)
