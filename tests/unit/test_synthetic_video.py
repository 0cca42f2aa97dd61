"""The synthetic moving-shapes dataset: deterministic, balanced, and learnable only from motion
and shape together."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from jouleprof.data.synthetic_video import SyntheticVideoDataset, SyntheticVideoSpec, render_clip
from jouleprof.errors import ConfigError

torch = pytest.importorskip("torch")


def best_shift(a: np.ndarray, b: np.ndarray, reach: int = 5) -> tuple[int, int]:
    """The circular (dy, dx) that best maps frame a onto frame b."""
    shifts = [(dy, dx) for dy in range(-reach, reach + 1) for dx in range(-reach, reach + 1)]
    return max(shifts, key=lambda s: float((np.roll(a, s, axis=(0, 1)) * b).sum()))


def test_clips_are_deterministic_balanced_and_move_their_way():
    spec = SyntheticVideoSpec(num_train=24, num_val=12, num_test=0, num_frames=6, size_px=32)
    a, la = render_clip(spec, "train", 5)
    b, lb = render_clip(spec, "train", 5)
    assert la == lb and np.array_equal(a, b)
    assert a.shape == (6, 32, 32, 3) and a.dtype == np.uint8
    assert not np.array_equal(render_clip(spec, "val", 5)[0], a)  # splits differ
    ds = SyntheticVideoDataset(spec, "train")
    assert Counter(ds.labels()) == {k: 2 for k in range(12)}
    x, y = ds[0]
    assert tuple(x.shape) == (6, 3, 32, 32) and x.dtype == torch.uint8 and y == ds.labels()[0]
    want = {"left": (0, -1), "right": (0, 1), "up": (-1, 0), "down": (1, 0)}
    for i in range(12):
        frames, label = render_clip(spec, "train", i)
        bright = (frames.max(-1) > 140).astype(float)
        total = np.sum([best_shift(bright[t], bright[t + 1]) for t in range(5)], axis=0)
        sign = tuple(int(np.sign(v)) if abs(v) >= 4 else 0 for v in total)
        assert sign == want[spec.directions[label % 4]], (label, total)


def test_bad_spec_names_the_field():
    with pytest.raises(ConfigError, match="shapes"):
        SyntheticVideoSpec(shapes=("hexagon",))
    with pytest.raises(ConfigError, match="num_frames"):
        SyntheticVideoSpec(num_frames=1)


def test_a_tiny_video_net_learns_it_and_a_single_frame_cannot():
    """Class = shape × direction. A small 3-D conv net far beats chance (1/8); the same net fed
    one frame repeated sees no motion — and the frame wraps around, so position says nothing
    about direction — so it cannot beat 1/4 (the shape alone) by much."""
    torch.set_num_threads(1)
    spec = SyntheticVideoSpec(
        num_train=160,
        num_val=80,
        num_test=0,
        num_frames=4,
        size_px=16,
        shapes=("square", "triangle"),
        travel=0.5,
    )

    def tensors(split):
        ds = SyntheticVideoDataset(spec, split)
        xs, ys = zip(*(ds[i] for i in range(len(ds))), strict=True)
        return torch.stack(xs).float().div(255).permute(0, 2, 1, 3, 4), torch.tensor(ys)

    xtr, ytr = tensors("train")
    xva, yva = tensors("val")

    def train(one_frame: bool, steps: int = 120) -> float:
        torch.manual_seed(0)
        net = torch.nn.Sequential(
            torch.nn.Conv3d(3, 16, (2, 5, 5), padding=(0, 2, 2)),
            torch.nn.ReLU(),
            torch.nn.AdaptiveMaxPool3d((1, 2, 2)),
            torch.nn.Flatten(),
            torch.nn.Linear(16 * 4, spec.num_classes),
        )
        opt = torch.optim.Adam(net.parameters(), lr=1e-2)

        def view(x):
            return x[:, :, :1].expand_as(x).contiguous() if one_frame else x

        g = torch.Generator().manual_seed(0)
        for _ in range(steps):
            k = torch.randint(0, len(xtr), (32,), generator=g)
            loss = torch.nn.functional.cross_entropy(net(view(xtr[k])), ytr[k])
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            return float((net(view(xva)).argmax(1) == yva).float().mean())

    video_acc, frame_acc = train(one_frame=False), train(one_frame=True)
    assert video_acc > 0.45, video_acc  # chance 1/8
    assert frame_acc < 0.4, frame_acc  # the shape alone: 1/4 at best, plus noise
    assert video_acc > frame_acc + 0.2
