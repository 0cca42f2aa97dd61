"""The V-JEPA2 training step, with its phases marked, and each phase replayable alone.

One step (reference: app/vjepa/train.py): per micro-batch, the target encoder runs on the whole
clip under no_grad and its features are layer-normed; the context encoder runs per mask set on
the kept tokens only, the predictor fills in the target positions, and the L1 loss is averaged
over mask sets; backward. Then one AdamW step and the EMA update of the target encoder.

Phases, as the marker sees them (nested names become "forward/target" in the recorder):

    step              (begins by setting the gradients to None: no GPU work)
      data            (× grad_accum_steps: next batch, host-to-device copy)
      forward
        target
        context
      backward
      optimizer       (learning rate of this step, AdamW step)
      ema             (_foreach_mul_ / _foreach_add_ with this step's momentum)
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from jouleprof.timeline.markers import NullRecorder, PhaseMarker
from jouleprof.workloads.vjepa2.collate import VJepa2Batch
from jouleprof.workloads.vjepa2.config import VJepa2Config
from jouleprof.workloads.vjepa2.model import build_networks, count_parameters, take_tokens
from jouleprof.workloads.vjepa2.optim import build_optimizer, lr_at, momentum_at

# config.attention_backend == "flash": these kernels, tried in this order.
_FLASH_FIRST = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]

logger = logging.getLogger(__name__)


def compile_module(module: torch.nn.Module) -> torch.nn.Module:
    """torch.compile with dynamic token counts (they change with every batch's masks).

    On torch 2.11 + H200, compiling the whole 12-block encoder with dynamic shapes hit an
    assertion in Inductor's coalesce tiling analysis; with that analysis off it compiles
    (about 2 minutes for vit_base) and runs. The option is only passed where it exists.
    """
    import torch._inductor.config as inductor_config

    options = {}
    if hasattr(inductor_config.triton, "coalesce_tiling_analysis"):
        options["triton.coalesce_tiling_analysis"] = False
    return torch.compile(module, dynamic=True, options=options or None)


@dataclass(frozen=True)
class StepResult:
    """What one optimizer step did."""

    loss: torch.Tensor
    """Mean loss over the step's micro-batches, detached and still on the device (no sync)."""
    samples: int
    """Clips trained on: batch_size × grad_accum_steps."""
    lr: float
    """Learning rate used."""
    momentum: float
    """EMA momentum used."""


class VJepa2Trainer:
    """Owns the networks, the optimizer and the step.

    Args:
        config: The run's configuration.
        device: Where to train; weights are created there directly.
        marker: Receives the step and phase boundaries (`NullRecorder` when None).
    """

    def __init__(
        self,
        config: VJepa2Config,
        device: torch.device | str,
        marker: PhaseMarker | None = None,
    ) -> None:
        self.config = config
        self.device = torch.device(device)
        self.marker: PhaseMarker = marker if marker is not None else NullRecorder()
        cuda = self.device.type == "cuda"
        devices = [self.device.index or 0] if cuda else []
        # Seeded without touching the caller's RNG state. The weights are made and initialized
        # on the device itself, and the target encoder is a copy made there (device to device,
        # not a second build, not a CPU round trip): test_trainer_makes_its_weights_on_its_device.
        # For scale, on a 2-core CPU box (where the device is the CPU): vit_large's networks took
        # 12.6 s to build, 1.6 s of it nn.Linear's default init that `_init_weights` overwrites,
        # and 6.3 s to deep-copy; on the meta device (the Python work alone) 0.13 s and 0.03 s.
        # On a GPU the same work is a few hundred kernels writing a few GB (vit_huge: 5 GB for
        # the encoder and its copy), so the redundant default init is left in place: skipping
        # it would change every weight drawn from a seed to save milliseconds.
        with torch.random.fork_rng(devices=devices), torch.device(self.device):
            torch.manual_seed(config.seed)
            self.encoder, self.predictor = build_networks(config)
        self.target_encoder = copy.deepcopy(self.encoder).requires_grad_(False)
        for net in (self.encoder, self.predictor):
            net.trunk.checkpointing = config.activation_checkpointing
            net.trunk.recompute_context = self._attention_kernels
        self.optimizer = build_optimizer(config, (self.encoder, self.predictor), self.device)
        self._online = list(self.encoder.parameters())
        self._target = list(self.target_encoder.parameters())
        self._run_encoder, self._run_predictor = self.encoder, self.predictor
        self._run_target = self.target_encoder
        if config.compile:
            self._run_encoder = compile_module(self.encoder)
            self._run_predictor = compile_module(self.predictor)
            self._run_target = compile_module(self.target_encoder)
        self.steps_done = 0
        self.data_wait_s = 0.0
        """Host seconds spent getting batches (waiting for the loader, starting the copy)."""
        self._last_batch: VJepa2Batch | None = None

    def parameter_counts(self) -> dict[str, int]:
        """Parameters of the encoder, predictor and target encoder (trainable: the first two)."""
        return {
            "encoder": count_parameters(self.encoder),
            "predictor": count_parameters(self.predictor),
            "target_encoder": count_parameters(self.target_encoder),
        }

    # The pieces of a step -------------------------------------------------------------------

    def _autocast(self) -> AbstractContextManager[object]:
        """bf16 autocast (per config) and the allowed attention kernels, around every forward
        (the backward of an attention call runs on the kernel its forward chose)."""
        stack = ExitStack()
        if self.config.dtype == "bf16":
            stack.enter_context(torch.autocast(self.device.type, dtype=torch.bfloat16))
        stack.enter_context(self._attention_kernels())
        return stack

    def _attention_kernels(self) -> AbstractContextManager[object]:
        """The allowed attention kernels (config.attention_backend), for a forward and for the
        recomputation of a checkpointed block in the backward."""
        if self.config.attention_backend == "flash" and self.device.type != "meta":
            return sdpa_kernel(_FLASH_FIRST, set_priority=True)
        return nullcontext()

    def _fetch(self, batches: Iterator[VJepa2Batch] | VJepa2Batch) -> VJepa2Batch:
        batch = batches if isinstance(batches, VJepa2Batch) else next(batches)
        self._last_batch = batch.to(self.device, non_blocking=True)
        return self._last_batch

    def _forward_target(self, batch: VJepa2Batch) -> torch.Tensor:
        with torch.no_grad():
            h = self._run_target(batch.clips)
            return F.layer_norm(h, (h.size(-1),))

    def _forward_context(self, batch: VJepa2Batch, h: torch.Tensor) -> torch.Tensor:
        losses = []
        for i, (keep, target) in enumerate(zip(batch.context, batch.target, strict=True)):
            z = self._run_encoder(batch.clips, keep)
            prediction = self._run_predictor(z, keep, target, i)
            losses.append(torch.mean(torch.abs(prediction - take_tokens(h, target))))
        return torch.stack(losses).mean()

    def _forward(self, batch: VJepa2Batch) -> torch.Tensor:
        with self._autocast():
            return self._forward_context(batch, self._forward_target(batch))

    def _optimizer_step(self) -> float:
        lr = lr_at(self.steps_done, self.config)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        return lr

    @torch.no_grad()
    def _ema(self) -> float:
        m = momentum_at(self.steps_done, self.config)
        torch._foreach_mul_(self._target, m)
        torch._foreach_add_(self._target, self._online, alpha=1.0 - m)
        return m

    # The step --------------------------------------------------------------------------------

    def train_step(self, batches: Iterator[VJepa2Batch] | VJepa2Batch) -> StepResult:
        """One optimizer step over `grad_accum_steps` micro-batches.

        Args:
            batches: An iterator of CPU batches (e.g. `iter(make_loader(...))`), from which the
                data phase takes one per micro-batch; or one batch, used for every micro-batch.
        """
        c, mark = self.config, self.marker
        losses = []
        with mark.step():
            # Gradients to None at the step's start rather than after the AdamW step (the same
            # math): the optimizer phase then holds the AdamW step alone, as its replay does.
            # On the H200 the phase with zero_grad in it took 7.7 ms against 5.4 ms replayed
            # (benchmarks/results/attr_vith_b8, run3).
            self.optimizer.zero_grad(set_to_none=True)
            for _ in range(c.grad_accum_steps):
                with mark.phase("data"):
                    t_fetch = time.perf_counter()
                    batch = self._fetch(batches)
                    self.data_wait_s += time.perf_counter() - t_fetch
                with mark.phase("forward"):
                    with mark.phase("target"), self._autocast():
                        h = self._forward_target(batch)
                    with mark.phase("context"), self._autocast():
                        loss = self._forward_context(batch, h)
                with mark.phase("backward"):
                    (loss / c.grad_accum_steps).backward()
                    losses.append(loss.detach())
            with mark.phase("optimizer"):
                lr = self._optimizer_step()
            with mark.phase("ema"):
                momentum = self._ema()
        self.steps_done += 1
        return StepResult(
            loss=torch.stack(losses).mean(), samples=c.samples_per_step, lr=lr, momentum=momentum
        )

    # Each phase alone, for the isolation method (a profiler loops one of these for seconds) --

    def _replay_batch(self, batch: VJepa2Batch | None) -> VJepa2Batch:
        if batch is None:
            if self._last_batch is None:
                raise ValueError("no cached batch: pass a batch or run train_step once first")
            return self._last_batch
        self._last_batch = batch.to(self.device)
        return self._last_batch

    def run_forward(self, batch: VJepa2Batch | None = None) -> torch.Tensor:
        """The forward phase alone (target and context, autograd graph built then dropped)."""
        return self._forward(self._replay_batch(batch)).detach()

    def run_forward_backward(self, batch: VJepa2Batch | None = None) -> torch.Tensor:
        """Forward and backward as in a training step: gradients start from None (a step sets
        them to None as it begins), so the backward writes them rather than adding to them.
        On the H200 a replay that accumulated took 190 ms a call against 155 ms for the same
        forward and backward inside training steps, biasing the isolation reference
        (benchmarks/results/attr_vith_b8)."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = self._forward(self._replay_batch(batch))
        loss.backward()
        return loss.detach()

    def run_optimizer_step(self) -> float:
        """The optimizer phase alone: this step's learning rate and one AdamW step.

        Gradients are kept, as in a step (which sets them to None only as the next step
        begins), so that every replay does the same work. The first
        call makes gradients with one forward+backward on the cached batch if there are none.
        Replays change the weights: the trainer is for measurement only afterwards.
        """
        if any(p.grad is None for p in self._online):
            self.run_forward_backward()
        return self._optimizer_step()

    def run_forward_backward_optimizer(self, batch: VJepa2Batch | None = None) -> float:
        """Forward, backward and the optimizer step as a training step runs them (gradients
        to None first, no EMA): the optimizer priced where it runs, right after a backward
        (forward+backward+optimizer − forward+backward), beside its replay alone, which may
        find caches, clocks and power in another state. Replays change the weights."""
        self.run_forward_backward(batch)
        return self._optimizer_step()

    def run_ema(self) -> float:
        """The EMA phase alone, with the current step's momentum."""
        return self._ema()
