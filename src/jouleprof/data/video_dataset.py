"""Training and evaluation clips read from a frame cache, and normalization on the device.

Items are uint8 (T, C, H, W) and the clip's label_id. Temporal sampling is segment-based: the
cached frames (spread over the whole clip) are cut into T equal segments and one frame is taken
from each — a random one in training, the middle one in evaluation — so every clip is seen whole
at a random phase. Spatial augmentation in training is a random resized crop and, optionally, a
horizontal flip of the whole clip; evaluation takes the centre square. The model's mean and std
are applied on the device (`normalize`), after the transfer.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from jouleprof.data.cache import FrameCache
from jouleprof.data.manifests.common import ManifestRow
from jouleprof.data.transforms import random_resized_crop_box


def segment_indices(total: int, num: int, rng: np.random.Generator | None) -> np.ndarray:
    """`num` positions in [0, total): one per equal segment, random (rng) or central (None).

    With fewer frames than `num`, positions repeat (each frame held for several outputs).
    """
    if total < 1 or num < 1:
        raise ValueError(f"total and num must be ≥ 1, got {total}, {num}")
    edges = np.linspace(0.0, total, num + 1)
    if rng is None:
        pos = 0.5 * (edges[:-1] + edges[1:])
    else:
        pos = edges[:-1] + rng.random(num) * (edges[1:] - edges[:-1])
    return np.minimum(np.floor(pos).astype(np.int64), total - 1)


def center_box(height: int, width: int) -> tuple[int, int, int, int]:
    side = min(height, width)
    return (height - side) // 2, (width - side) // 2, side, side


def crop_resize(frames: np.ndarray, box: tuple[int, int, int, int], size_px: int, flip: bool):
    """uint8 (T, H, W, 3) → uint8 torch (T, 3, size_px, size_px) of `box`, optionally flipped."""
    import torch
    import torch.nn.functional as F

    top, left, h, w = box
    crop = torch.from_numpy(np.ascontiguousarray(frames[:, top : top + h, left : left + w]))
    x = crop.permute(0, 3, 1, 2)
    if (h, w) != (size_px, size_px):
        y = F.interpolate(
            x.float(),
            size=(size_px, size_px),
            mode="bilinear",
            antialias=h > size_px,
            align_corners=False,
        )
        x = y.round_().clamp_(0, 255).to(torch.uint8)
    if flip:
        x = x.flip(-1)
    return x.contiguous()


class CachedClipDataset:
    """Clips of one manifest split, read from a frame cache.

    Args:
        rows: The split's manifest rows.
        cache: The frame cache holding them (`jouleprof data cache`).
        num_frames: Frames per item.
        size_px: Side of the square output.
        train: Random temporal and spatial augmentation (else deterministic, centred).
        hflip: In training, flip half the clips horizontally.
        scale: Area fraction range of the random resized crop.
        ratio: Width/height range of the crop.
        seed: Mixed with torch's per-worker seed, so runs repeat given the loader's generator.
    """

    def __init__(
        self,
        rows: Sequence[ManifestRow],
        cache: FrameCache,
        num_frames: int,
        size_px: int,
        *,
        train: bool,
        hflip: bool = True,
        scale: tuple[float, float] = (0.4, 1.0),
        ratio: tuple[float, float] = (0.75, 1.33),
        seed: int = 0,
    ) -> None:
        if not rows:
            raise ValueError("rows is empty: the split has no clip")
        missing = [r.path for r in rows if not cache.has(r.path)]
        if missing:
            from jouleprof.data.cache import CacheError

            raise CacheError(
                f"{len(missing)} clip(s) of this split are not in the frame cache "
                f"{cache.folder}, e.g. {missing[:3]}: run `jouleprof data cache MANIFEST "
                f"--out {cache.folder}` (it resumes), or remove the clips that fail to decode "
                "from the manifest"
            )
        self.rows = list(rows)
        self.cache = cache
        self.num_frames, self.size_px = num_frames, size_px
        self.train, self.hflip = train, hflip
        self.scale, self.ratio = scale, ratio
        self.seed = seed
        self._rng: np.random.Generator | None = None
        self._pid = -1

    def __len__(self) -> int:
        return len(self.rows)

    def labels(self) -> list[int]:
        return [r.label_id for r in self.rows]

    def _generator(self) -> np.random.Generator:
        import torch

        if self._rng is None or self._pid != os.getpid():
            self._rng = np.random.default_rng([self.seed, torch.initial_seed() % (1 << 63)])
            self._pid = os.getpid()
        return self._rng

    def __getitem__(self, index: int):
        row = self.rows[index]
        frames = self.cache.load(row.path)
        rng = self._generator() if self.train else None
        idx = segment_indices(len(frames), self.num_frames, rng)
        picked = np.asarray(frames[idx])
        h, w = picked.shape[1:3]
        if rng is not None:
            box = random_resized_crop_box(h, w, self.scale, self.ratio, rng)
            flip = bool(self.hflip and rng.random() < 0.5)
        else:
            box, flip = center_box(h, w), False
        return crop_resize(picked, box, self.size_px, flip), row.label_id


def normalize(x, mean: Sequence[float], std: Sequence[float], dtype=None):
    """uint8 (B, T, C, H, W) on any device → float (B, T, C, H, W), (x/255 − mean) / std."""
    import torch

    dtype = dtype or torch.float32
    m = torch.tensor(mean, device=x.device, dtype=dtype).view(1, 1, -1, 1, 1)
    s = torch.tensor(std, device=x.device, dtype=dtype).view(1, 1, -1, 1, 1)
    return (x.to(dtype) / 255.0 - m) / s


class VideoData:
    """The splits of one run and their loaders (uint8 clips; labels as class indices)."""

    def __init__(self, train, val, test, num_classes: int, classes, info: dict) -> None:
        self.train, self.val, self.test = train, val, test
        self.num_classes = num_classes
        self.classes = tuple(classes)
        self.info = info
        self.train_loader = self.val_loader = self.test_loader = None

    def make_loaders(
        self, batch_size: int, eval_batch_size: int, num_workers: int, seed: int, pin: bool
    ) -> None:
        import torch
        from torch.utils.data import DataLoader

        g = torch.Generator().manual_seed(seed)
        common = {"num_workers": num_workers, "pin_memory": pin}
        if num_workers > 0:
            common["persistent_workers"] = True
        self.train_loader = DataLoader(
            self.train,
            batch_size=batch_size,
            shuffle=True,
            drop_last=True,
            generator=g,
            **common,
        )
        self.val_loader = DataLoader(self.val, batch_size=eval_batch_size, **common)
        if self.test is not None and len(self.test):
            self.test_loader = DataLoader(self.test, batch_size=eval_batch_size, **common)

    def describe(self) -> dict:
        return {
            **self.info,
            "num_classes": self.num_classes,
            "clips": {
                "train": len(self.train),
                "val": len(self.val),
                "test": 0 if self.test is None else len(self.test),
            },
        }


def load_video_data(
    dataset: str,
    frames: int,
    size_px: int,
    *,
    seed: int,
    cache: str | None = None,
    root: str | None = None,
    synthetic_clips: tuple[int, int, int] = (480, 120, 120),
    need_test: bool = False,
) -> VideoData:
    """The splits of `dataset`: 'synthetic', or a manifest CSV read through its frame cache.

    Raises:
        ManifestError / CacheError: the manifest fails its checks or clips are not cached.
    """
    from pathlib import Path

    if dataset == "synthetic":
        from jouleprof.data.synthetic_video import SyntheticVideoDataset, SyntheticVideoSpec

        n_tr, n_va, n_te = synthetic_clips
        spec = SyntheticVideoSpec(
            num_train=n_tr,
            num_val=n_va,
            num_test=n_te,
            num_frames=frames,
            size_px=size_px,
            seed=seed,
        )
        splits = [SyntheticVideoDataset(spec, s) for s in ("train", "val", "test")]
        info = {"dataset": "synthetic", "spec": {**spec.__dict__}}
        return VideoData(*splits, spec.num_classes, spec.classes, info)
    from jouleprof.data.manifests import load_manifest

    required = ("train", "val", "test") if need_test else ("train", "val")
    m = load_manifest(dataset, root, required_splits=required)
    folder = Path(cache) if cache else m.csv_path.with_name(m.csv_path.stem + "_cache")
    fc = FrameCache(folder)
    if not (folder / "cache.json").is_file():
        from jouleprof.data.cache import CacheError

        raise CacheError(
            f"no frame cache at {folder}: run `jouleprof data cache {m.csv_path}` first "
            "(or pass --cache)"
        )
    train = CachedClipDataset(m.split("train"), fc, frames, size_px, train=True, seed=seed)
    val = CachedClipDataset(m.split("val"), fc, frames, size_px, train=False)
    test_rows = m.split("test")
    test = (
        CachedClipDataset(test_rows, fc, frames, size_px, train=False)
        if test_rows and need_test
        else None
    )
    info = {"dataset": str(m.csv_path), "root": str(m.root), "cache": str(folder)}
    names = dict(zip(m.label_ids, m.classes, strict=True))
    classes = [names.get(i, f"class{i}") for i in range(m.num_classes)]
    return VideoData(train, val, test, m.num_classes, classes, info)
