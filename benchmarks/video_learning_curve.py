"""Does a video classifier learn the synthetic moving-shapes task from random initialization?

    python3 benchmarks/video_learning_curve.py --model videomae-b --method full --lr 2e-3 \
        --steps 600 --shapes square            # tiny model, 4 x 32^2 clips, on the CPU

Trains with the run's own pieces (`VideoTrainer`: the method's adapters, AdamW, and
`video_run.lr_at`'s warm-up + cosine schedule) on clips rendered once into memory, and prints the
validation top-1 every --every steps (`steps:loss/top1%`), so the dataset's difficulty and a
learning rate can be tried in minutes without a GPU. Randomly initialized models only.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="videomae-b")
    ap.add_argument("--method", default="full")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--full-size", action="store_true", help="the full-size model (slow on a CPU)")
    ap.add_argument(
        "--mid",
        action="store_true",
        help="VideoMAE 4 layers x 192 wide with the full model's 16-px patches and tubelet 2 "
        "(full fine-tuning only): the full-size patch geometry at a CPU's cost",
    )
    ap.add_argument("--frames", type=int, default=4)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--clips", default="480,96", help="train,val clips")
    ap.add_argument("--shapes", default="square,circle,triangle")
    ap.add_argument("--directions", default="left,right,up,down")
    ap.add_argument("--travel", type=float, default=None)
    ap.add_argument("--radius", default=None, help="LO,HI half-size range")
    ap.add_argument("--noise", type=float, default=None)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)

    import torch

    from jouleprof.bench.video_run import lr_at
    from jouleprof.data.synthetic_video import SyntheticVideoDataset, SyntheticVideoSpec
    from jouleprof.workloads.video.models import normalize
    from jouleprof.workloads.video.step import TrainerConfig, VideoTrainer

    n_train, n_val = (int(v) for v in a.clips.split(","))
    kw = {"travel": a.travel, "noise": a.noise}
    if a.radius:
        kw["radius"] = tuple(float(v) for v in a.radius.split(","))
    spec = SyntheticVideoSpec(
        num_train=n_train,
        num_val=n_val,
        num_test=0,
        num_frames=a.frames,
        size_px=a.size,
        shapes=tuple(a.shapes.split(",")),
        directions=tuple(a.directions.split(",")),
        **{k: v for k, v in kw.items() if v is not None},
    )

    def tensors(split):
        ds = SyntheticVideoDataset(spec, split)
        return torch.stack([ds[i][0] for i in range(len(ds))]), torch.tensor(ds.labels())

    x, y = tensors("train")
    xv, yv = tensors("val")
    if a.mid:
        trainer = MidVideoMAE(spec.num_classes, a.frames, a.size, a.lr, a.seed)
    else:
        trainer = VideoTrainer(_trainer_config(a, spec, TrainerConfig), "cpu")
    ms = trainer.classifier.spec
    g = torch.Generator().manual_seed(a.seed)
    t0, points = time.monotonic(), []
    for step in range(a.steps):
        idx = torch.randint(0, len(x), (a.batch,), generator=g)
        trainer.set_lr(lr_at(step, a.steps, a.lr))
        loss = trainer.train_step(normalize(x[idx], ms), y[idx])
        if (step + 1) % a.every == 0 or step + 1 == a.steps:
            pred = torch.cat(
                [
                    trainer.eval_logits(normalize(xv[i : i + 48], ms)).argmax(1)
                    for i in range(0, len(xv), 48)
                ]
            )
            top1 = 100 * float((pred == yv).float().mean())
            points.append(f"{step + 1}:{float(loss):.2f}/{top1:.0f}")
            print(" ".join(points), f"({time.monotonic() - t0:.0f} s)", flush=True)
    print(f"chance {100 / spec.num_classes:.1f} %; {vars(a)}")
    return 0


def _trainer_config(a, spec, TrainerConfig):
    return TrainerConfig(
        model=a.model,
        method=a.method,
        precision="fp32",
        num_classes=spec.num_classes,
        tiny=not a.full_size,
        frames=a.frames,
        size=a.size,
        lr=a.lr,
        optimizer_impl="foreach",
        seed=a.seed,
    )


class MidVideoMAE:
    """The --mid model and its step: AdamW (decay 0.05 on matrices), fp32, full fine-tuning."""

    def __init__(self, num_classes: int, frames: int, size: int, lr: float, seed: int) -> None:
        import torch
        from transformers import VideoMAEConfig, VideoMAEForVideoClassification

        from jouleprof.workloads.video.models import get_spec

        torch.manual_seed(seed)
        self.net = VideoMAEForVideoClassification(
            VideoMAEConfig(
                image_size=size,
                num_frames=frames,
                num_labels=num_classes,
                use_mean_pooling=True,
                hidden_size=192,
                num_hidden_layers=4,
                num_attention_heads=3,
                intermediate_size=768,
            )
        )
        self.classifier = type("C", (), {"spec": get_spec("videomae-b")})
        params = list(self.net.parameters())
        self.opt = torch.optim.AdamW(
            [
                {"params": [p for p in params if p.ndim > 1], "weight_decay": 0.05},
                {"params": [p for p in params if p.ndim <= 1], "weight_decay": 0.0},
            ],
            lr=lr,
        )
        self._torch = torch

    def set_lr(self, lr: float) -> None:
        for group in self.opt.param_groups:
            group["lr"] = lr

    def train_step(self, x, y):
        logits = self.net(pixel_values=x).logits
        loss = self._torch.nn.functional.cross_entropy(logits, y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad()
        return loss.detach()

    def eval_logits(self, x):
        self.net.eval()
        try:
            with self._torch.no_grad():
                return self.net(pixel_values=x).logits
        finally:
            self.net.train()


if __name__ == "__main__":
    raise SystemExit(main())
