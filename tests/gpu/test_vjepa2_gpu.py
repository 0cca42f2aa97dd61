"""The V-JEPA2 step on a CUDA GPU: bf16 autocast, fused AdamW, phases, replay, checkpointing."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from jouleprof.workloads.vjepa2 import get_preset  # noqa: E402
from jouleprof.workloads.vjepa2.collate import VJepa2Collator  # noqa: E402
from jouleprof.workloads.vjepa2.step import VJepa2Trainer  # noqa: E402

pytestmark = pytest.mark.gpu


def batch_for(config):
    clips = [torch.randn(3, config.num_frames, config.crop_px, config.crop_px)] * config.batch_size
    return VJepa2Collator(config)(clips).pin_memory()


def test_tiny_bf16_fused_on_cuda():
    config = get_preset("tiny", dtype="bf16", optimizer_impl="fused")
    trainer = VJepa2Trainer(config, "cuda")
    assert trainer.optimizer.defaults["fused"]
    batch = batch_for(config)
    losses = [float(trainer.train_step(batch).loss) for _ in range(10)]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert next(trainer.encoder.parameters()).dtype == torch.float32  # autocast, fp32 weights
    assert torch.isfinite(trainer.run_forward())
    assert torch.isfinite(trainer.run_forward_backward())
    trainer.run_optimizer_step()
    trainer.run_ema()


def test_vit_base_checkpointing_saves_memory():
    # Each configuration's peak is counted from what was allocated before its trainer was built,
    # and the previous trainer is collected first: in the full GPU suite a trainer held by a
    # reference cycle outlived its `del` and counted in the next configuration's peak.
    import gc

    peaks = {}
    for ckpt in (False, True):
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated()
        config = get_preset("vit_base", batch_size=2, activation_checkpointing=ckpt)
        trainer = VJepa2Trainer(config, "cuda")
        batch = batch_for(config)
        trainer.train_step(batch)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        trainer.train_step(batch)
        torch.cuda.synchronize()
        peaks[ckpt] = torch.cuda.max_memory_allocated() - before
        del trainer, batch
    assert peaks[True] < peaks[False], peaks
