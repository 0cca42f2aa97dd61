"""The V-JEPA2 step on a CPU: phases, learning, EMA, weight decay, accumulation, checkpointing,
presets, the run loop and the data loader."""

from __future__ import annotations

import dataclasses
import logging
from contextlib import contextmanager

import pytest
import torch

from jouleprof.timeline.markers import NullRecorder
from jouleprof.workloads.vjepa2 import VJepa2Config, get_preset, preset_names
from jouleprof.workloads.vjepa2.collate import VJepa2Batch, VJepa2Collator, make_loader
from jouleprof.workloads.vjepa2.loop import run
from jouleprof.workloads.vjepa2.model import build_networks, count_parameters
from jouleprof.workloads.vjepa2.optim import lr_at, momentum_at
from jouleprof.workloads.vjepa2.step import VJepa2Trainer

CPU = torch.device("cpu")


class RecordingMarker:
    """A PhaseMarker that records the order of steps and (nested) phases."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self._stack: list[str] = []

    @contextmanager
    def step(self):
        self.events.append("step")
        yield
        self.events.append("/step")

    @contextmanager
    def phase(self, name: str):
        self._stack.append(name)
        self.events.append("/".join(self._stack))
        try:
            yield
        finally:
            self._stack.pop()


def tiny(**overrides) -> VJepa2Config:
    return get_preset("tiny", **overrides)


def make_batch(config: VJepa2Config, seed: int = 0) -> VJepa2Batch:
    g = torch.Generator().manual_seed(seed)
    clips = [
        torch.randn(3, config.num_frames, config.crop_px, config.crop_px, generator=g)
        for _ in range(config.batch_size)
    ]
    return VJepa2Collator(config, seed=seed)(clips)


ONE_MICRO_BATCH = ["data", "forward", "forward/target", "forward/context", "backward"]


@pytest.mark.parametrize("accum", [1, 2])
def test_phase_sequence_and_samples(accum):
    config = tiny(grad_accum_steps=accum)
    marker = RecordingMarker()
    trainer = VJepa2Trainer(config, CPU, marker)
    batch = make_batch(config)
    result = trainer.train_step(iter([batch] * accum))
    expected = ["step", *ONE_MICRO_BATCH * accum, "optimizer", "ema", "/step"]
    assert marker.events == expected
    assert result.samples == config.batch_size * accum == config.samples_per_step
    assert torch.isfinite(result.loss)


def test_loss_decreases_on_a_fixed_batch():
    config = tiny()
    trainer = VJepa2Trainer(config, CPU, NullRecorder())
    batch = make_batch(config)
    losses = [float(trainer.train_step(batch).loss) for _ in range(20)]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-5:]) / 5 < 0.95 * sum(losses[:5]) / 5, losses


def test_ema_follows_the_momentum_rule_exactly():
    config = tiny(ema_start=0.9, ema_end=1.0, total_steps=10)
    trainer = VJepa2Trainer(config, CPU, NullRecorder())
    name = "trunk.blocks.0.fc1.weight"
    target = dict(trainer.target_encoder.named_parameters())[name]
    online = dict(trainer.encoder.named_parameters())[name]
    trainer.train_step(make_batch(config))  # step 0 moves the online weights
    before = target.detach().clone()
    result = trainer.train_step(make_batch(config, seed=1))  # step 1, momentum 0.91
    m = momentum_at(1, config)
    assert result.momentum == pytest.approx(0.91)
    assert m == pytest.approx(0.91)
    expected = before * m + online.detach() * (1 - m)
    torch.testing.assert_close(target.detach(), expected, rtol=0, atol=1e-7)
    assert not torch.equal(target.detach(), before)
    assert all(not p.requires_grad for p in trainer.target_encoder.parameters())


def test_no_weight_decay_on_biases_and_1d_params():
    config = tiny(weight_decay=0.5, lr_start=0.1, lr_peak=0.1, lr_final=0.1)
    trainer = VJepa2Trainer(config, CPU, NullRecorder())
    decay, no_decay = trainer.optimizer.param_groups
    assert decay["weight_decay"] == 0.5 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim >= 2 for p in decay["params"])
    named = {
        **{f"enc.{n}": p for n, p in trainer.encoder.named_parameters()},
        **{f"pred.{n}": p for n, p in trainer.predictor.named_parameters()},
    }
    exempt = {id(p) for p in no_decay["params"]}
    for name, p in named.items():
        assert (id(p) in exempt) == ("bias" in name or p.ndim == 1), name
    # With zero gradients, AdamW only decays: 1-D parameters must not move at all.
    for p in named.values():
        p.grad = torch.zeros_like(p)
    before = {n: p.detach().clone() for n, p in named.items()}
    lr = trainer.run_optimizer_step()
    for name, p in named.items():
        if p.ndim == 1:
            torch.testing.assert_close(p.detach(), before[name], rtol=0, atol=0)
        else:
            torch.testing.assert_close(p.detach(), before[name] * (1 - lr * 0.5))


def test_grad_accumulation_of_one_batch_equals_one_step():
    batch = make_batch(tiny())
    one = VJepa2Trainer(tiny(), CPU)
    two = VJepa2Trainer(tiny(grad_accum_steps=2), CPU)
    r1, r2 = one.train_step(batch), two.train_step(batch)
    assert (r1.samples, r2.samples) == (4, 8)
    torch.testing.assert_close(r1.loss, r2.loss)
    for p, q in zip(one.encoder.parameters(), two.encoder.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_activation_checkpointing_gives_the_same_loss_and_grads():
    batch = make_batch(tiny())
    plain = VJepa2Trainer(tiny(), CPU)
    ckpt = VJepa2Trainer(tiny(activation_checkpointing=True), CPU)
    torch.testing.assert_close(plain.run_forward_backward(batch), ckpt.run_forward_backward(batch))
    nets = [(plain.encoder, ckpt.encoder), (plain.predictor, ckpt.predictor)]
    for a, b in nets:
        for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
            assert p.grad is not None, name
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-7, msg=name)


def test_checkpointed_blocks_recompute_under_the_forward_attention_kernels():
    # checkpoint restores autocast in the backward's recomputation but not `sdpa_kernel`; on the
    # H200 the recomputation then chose cuDNN attention where the forward ran flash, and
    # checkpoint refused the mismatched saved tensors. Every recomputed block must enter the
    # trainer's attention-kernel context.
    config = tiny(activation_checkpointing=True)
    trainer = VJepa2Trainer(config, CPU)
    for net in (trainer.encoder, trainer.predictor):
        assert net.trunk.recompute_context == trainer._attention_kernels
    entered = []

    @contextmanager
    def recording():
        entered.append(torch.is_grad_enabled())
        with trainer._attention_kernels():
            yield

    for net in (trainer.encoder, trainer.predictor):
        net.trunk.recompute_context = recording
    batch = make_batch(config)
    trainer.run_forward_backward(batch)
    blocks = len(trainer.encoder.trunk.blocks) + len(trainer.predictor.trunk.blocks)
    assert len(entered) == blocks * len(batch.context)


def test_replay_methods_do_one_phase_on_the_cached_batch():
    config = tiny()
    marker = RecordingMarker()
    trainer = VJepa2Trainer(config, CPU, marker)
    with pytest.raises(ValueError, match="no cached batch"):
        trainer.run_forward()
    trainer.train_step(make_batch(config))
    marker.events.clear()
    # A step keeps its gradients until the next one begins; the forward replay touches none.
    kept = [p.grad.clone() for p in trainer.encoder.parameters()]
    assert torch.isfinite(trainer.run_forward())
    for k, p in zip(kept, trainer.encoder.parameters(), strict=True):
        torch.testing.assert_close(k, p.grad)
    assert torch.isfinite(trainer.run_forward_backward())
    assert all(p.grad is not None for p in trainer.encoder.parameters())
    grads = [p.grad.clone() for p in trainer.encoder.parameters()]
    # A second replay writes the same gradients again (it does not add to them), as a
    # training step's backward does after the optimizer phase set them to None.
    trainer.run_forward_backward()
    for g, p in zip(grads, trainer.encoder.parameters(), strict=True):
        torch.testing.assert_close(g, p.grad)
    assert trainer.run_optimizer_step() == lr_at(1, config)
    # Gradients stay, so every replay of the optimizer does the same work.
    for g, p in zip(grads, trainer.encoder.parameters(), strict=True):
        torch.testing.assert_close(g, p.grad)
    assert trainer.run_ema() == momentum_at(1, config)
    assert marker.events == []


def test_bf16_autocast_on_cpu_and_fused_falls_back(caplog):
    config = tiny(dtype="bf16", optimizer_impl="fused")
    with caplog.at_level(logging.WARNING):
        trainer = VJepa2Trainer(config, CPU)
    assert "fused" in caplog.text
    assert torch.isfinite(trainer.train_step(make_batch(config)).loss)


def test_trainer_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    VJepa2Trainer(tiny(), CPU)
    torch.testing.assert_close(torch.rand(3), expected)


@pytest.mark.parametrize("name", preset_names())
def test_presets(name):
    config = get_preset(name)
    assert isinstance(config, VJepa2Config)
    if name == "tiny":
        trainer = VJepa2Trainer(config, CPU)
        assert torch.isfinite(trainer.train_step(make_batch(config)).loss)
        return
    assert config.num_tokens == 1568
    with torch.device("meta"):  # shapes only: no memory for hundreds of millions of weights
        encoder, predictor = build_networks(config)
    assert next(encoder.parameters()).is_meta
    minimum = {"vit_base": 80e6, "vit_large": 300e6, "vit_huge": 600e6}[name]
    assert count_parameters(encoder) > minimum
    assert 15e6 < count_parameters(predictor) < 30e6


def test_get_preset_overrides_and_errors():
    assert get_preset("vit_huge", batch_size=2).batch_size == 2
    with pytest.raises(ValueError, match="tiny.*vit_base.*vit_huge.*vit_large"):
        get_preset("vit_gigantic")
    with pytest.raises(ValueError, match="batchsize"):
        get_preset("tiny", batchsize=2)
    with pytest.raises(ValueError, match="encoder_width .* multiple of encoder_heads"):
        get_preset("tiny", encoder_heads=3)


@pytest.mark.parametrize(
    ("field", "value"),
    [("dtype", "fp16"), ("optimizer_impl", "apex"), ("batch_size", 0), ("ema_end", 1.5)],
)
def test_config_checks_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(tiny(), **{field: value})


def test_run_by_steps_and_by_duration():
    config = tiny()
    seen = []
    batches = iter([make_batch(config, seed=i) for i in range(3)])
    summary = run(
        config,
        NullRecorder(),
        steps=5,
        data=batches,
        device="cpu",
        on_step=lambda i, t, n: seen.append((i, t, n)),
    )
    # The iterator holds 3 batches: the run stops when it runs out.
    assert summary.steps == 3 and summary.samples == 12
    assert [s[0] for s in seen] == [0, 1, 2] and all(s[1] > 0 and s[2] == 4 for s in seen)
    forever = iter(lambda: make_batch(config), None)
    summary = run(config, NullRecorder(), duration_s=0.3, data=forever, device="cpu")
    assert summary.steps >= 1 and summary.final_loss is not None
    with pytest.raises(ValueError, match="exactly one"):
        run(config, NullRecorder(), steps=1, duration_s=1.0, data=forever)


def test_loader_over_fakevideo(tmp_path):
    pytest.importorskip("av", reason="PyAV is the optional 'video' extra")
    from jouleprof.data.fakevideo import FakeVideo, FakeVideoSpec

    config = tiny(batch_size=2)
    spec = FakeVideoSpec(num_clips=3, frames_per_clip=8, height_px=72, width_px=80)
    dataset = FakeVideo(
        spec, config.num_frames, config.frame_stride, config.crop_px, cache_dir=tmp_path
    )
    loader = make_loader(config, dataset, device="cpu")
    assert not loader.pin_memory
    it = iter(loader)
    batches = [next(it) for _ in range(3)]  # more than one epoch: the sampler never ends
    for batch in batches:
        assert batch.clips.shape == (2, 3, 4, 64, 64) and batch.clips.dtype == torch.float32
        assert len(batch.context) == len(batch.target) == len(config.masks)
        assert all(c.shape[0] == 2 and c.dtype == torch.int64 for c in batch.context)
    trainer = VJepa2Trainer(config, CPU)
    assert torch.isfinite(trainer.train_step(it).loss)


def test_attention_backend_choice_keeps_the_loss_and_is_validated():
    batch = make_batch(tiny())
    flash = VJepa2Trainer(tiny(dtype="fp32"), CPU).run_forward(batch)
    auto = VJepa2Trainer(tiny(dtype="fp32", attention_backend="auto"), CPU).run_forward(batch)
    torch.testing.assert_close(flash, auto, rtol=1e-4, atol=1e-5)
    with pytest.raises(Exception, match="attention_backend must be one of"):
        tiny(attention_backend="cudnn-please")


def test_trainer_makes_its_weights_on_its_device():
    """The networks are built under `torch.device(device)` and the target encoder is a copy made
    there: no weight is initialized on the CPU and then moved (on the meta device, any CPU
    tensor bigger than an RNG state would be such a weight)."""
    from torch.utils import _pytree as pytree
    from torch.utils._python_dispatch import TorchDispatchMode

    class CpuTensors(TorchDispatchMode):
        largest = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                    self.largest = max(self.largest, t.numel())
            return out

    with CpuTensors() as seen:
        trainer = VJepa2Trainer(get_preset("vit_base"), "meta")
    assert seen.largest < 10_000
    for net in (trainer.encoder, trainer.predictor, trainer.target_encoder):
        assert all(t.is_meta for t in [*net.parameters(), *net.buffers()])


def test_a_step_begins_from_no_gradient():
    # Left-over gradients (say, from a replay) must not leak into a step's update: the step
    # sets them to None as it begins, so its backward writes them afresh.
    config = tiny()
    trainer = VJepa2Trainer(config, CPU)
    for p in trainer.encoder.parameters():
        p.grad = torch.full_like(p, 1e6)
    trainer.train_step(make_batch(config))
    grads = [p.grad for p in trainer.encoder.parameters() if p.grad is not None]
    assert grads and max(float(g.abs().max()) for g in grads) < 1e5
