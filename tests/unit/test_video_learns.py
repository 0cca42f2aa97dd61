"""Fine-tuning learns the synthetic moving-shapes task from random initialization.

A benchmark that ranks configurations by accuracy needs a task its short runs can learn. Here a
tiny VideoMAE (the real trainer: adapter, AdamW, the run's warm-up + cosine schedule) learns the
four directions of motion — the half of the task no single frame can tell — far above chance.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")


def _tensors(spec, split):
    from jouleprof.data.synthetic_video import SyntheticVideoDataset

    ds = SyntheticVideoDataset(spec, split)
    return torch.stack([ds[i][0] for i in range(len(ds))]), torch.tensor(ds.labels())


def test_a_short_fine_tuning_learns_the_direction_of_motion():
    """LoRA (rank 16, α 32) plus the head, 200 steps of 8 clips (4 × 32²), lr 5e-3, from random
    initialization; chance is 25 %."""
    from jouleprof.bench.video_run import lr_at
    from jouleprof.data.synthetic_video import SyntheticVideoSpec
    from jouleprof.workloads.video.models import normalize
    from jouleprof.workloads.video.step import TrainerConfig, VideoTrainer

    torch.set_num_threads(1)
    lr = 5e-3
    spec = SyntheticVideoSpec(
        num_train=320, num_val=96, num_test=0, num_frames=4, size_px=32, shapes=("square",)
    )
    x, y = _tensors(spec, "train")
    xv, yv = _tensors(spec, "val")
    cfg = TrainerConfig(
        model="videomae-b",
        method="lora",
        precision="fp32",
        num_classes=spec.num_classes,
        tiny=True,
        lr=lr,
        optimizer_impl="foreach",
        seed=0,
    )
    trainer = VideoTrainer(cfg, "cpu")
    model_spec = trainer.classifier.spec
    g = torch.Generator().manual_seed(0)
    steps, batch = 200, 8
    for step in range(steps):
        idx = torch.randint(0, len(x), (batch,), generator=g)
        trainer.set_lr(lr_at(step, steps, lr))
        trainer.train_step(normalize(x[idx], model_spec), y[idx])
    pred = trainer.eval_logits(normalize(xv, model_spec)).argmax(1)
    top1 = float((pred == yv).float().mean())
    # Chance is 1/4: 48 of 96 right by chance has probability below 1e-7.
    assert top1 >= 0.5, f"val top-1 {top1:.2f} after {steps} steps (chance 0.25)"
