"""Image classification data for the energy-aware study, none of it downloaded.

Shipped or generated here: ``digits`` (scikit-learn's 1,797 8×8 handwritten digits),
``synthetic`` (Gaussian class prototypes plus noise) and ``shapes`` (procedurally drawn shapes at
random positions and sizes, with noise: spatial structure a CNN can use). Read from a local
folder when a user has them: ``mnist`` and ``fashion-mnist`` (the four IDX files, optionally
gzipped) and ``cifar10`` (the python pickle batches, data_batch_1..5 and test_batch). A folder
that does not hold what its loader expects raises an error listing what it does hold.

Every loader returns an `ImageData` of float32 arrays (N, C, H, W) scaled to [0, 1] and int64
labels, with a fixed train/test split (seed 0) that does not vary with the training seed.
"""

from __future__ import annotations

import gzip
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from jouleprof.errors import JouleprofError

BUILTIN = ("digits", "synthetic", "shapes")
LOCAL = ("mnist", "fashion-mnist", "cifar10")
DATASETS = BUILTIN + LOCAL

IDX_FILES = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte",
    "test_y": "t10k-labels-idx1-ubyte",
}
CIFAR_FILES = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",)


class DatasetError(JouleprofError, ValueError):
    """A dataset name or folder is wrong; the message says what was expected and found."""


@dataclass(frozen=True)
class ImageData:
    """A split image classification dataset."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    n_classes: int
    source: str
    """Where the data came from (package, generator and its seed, or the folder)."""

    @property
    def in_shape(self) -> tuple[int, int, int]:
        return tuple(self.x_train.shape[1:])  # type: ignore[return-value]

    def describe(self) -> dict:
        return {
            "name": self.name,
            "n_train": int(len(self.x_train)),
            "n_test": int(len(self.x_test)),
            "in_shape": list(self.in_shape),
            "n_classes": self.n_classes,
            "source": self.source,
        }


def _split(name, x, y, n_classes, source, test_frac=0.2) -> ImageData:
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(x))
    n_test = max(1, int(round(test_frac * len(x))))
    te, tr = idx[:n_test], idx[n_test:]
    return ImageData(name, x[tr], y[tr], x[te], y[te], n_classes, source)


def _digits() -> ImageData:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    return _split("digits", x, d.target.astype(np.int64), 10, "scikit-learn load_digits (shipped)")


def _synthetic(n: int, side: int, n_classes: int = 10) -> ImageData:
    rng = np.random.default_rng(0)
    protos = rng.random((n_classes, 1, side, side)).astype(np.float32)
    y = rng.integers(0, n_classes, n)
    x = protos[y] + 0.35 * rng.standard_normal((n, 1, side, side)).astype(np.float32)
    x = np.clip(x, 0.0, 1.0).astype(np.float32)
    src = f"generated: {n_classes} Gaussian prototypes + noise σ=0.35, seed 0"
    return _split("synthetic", x, y.astype(np.int64), n_classes, src)


SHAPE_NAMES = ("square", "disc", "ring", "cross", "hbar", "vbar", "triangle", "diamond")


def _shapes(n: int, side: int) -> ImageData:
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float32)
    x = np.zeros((n, 1, side, side), np.float32)
    y = rng.integers(0, len(SHAPE_NAMES), n)
    for i in range(n):
        r = rng.uniform(0.18, 0.35) * side
        cy, cx = rng.uniform(r, side - r, 2)
        dy, dx = yy - cy, xx - cx
        k = SHAPE_NAMES[y[i]]
        if k == "square":
            m = (abs(dy) < r) & (abs(dx) < r)
        elif k == "disc":
            m = dy**2 + dx**2 < r**2
        elif k == "ring":
            m = (dy**2 + dx**2 < r**2) & (dy**2 + dx**2 > (0.55 * r) ** 2)
        elif k == "cross":
            m = ((abs(dy) < 0.3 * r) & (abs(dx) < r)) | ((abs(dx) < 0.3 * r) & (abs(dy) < r))
        elif k == "hbar":
            m = (abs(dy) < 0.35 * r) & (abs(dx) < r)
        elif k == "vbar":
            m = (abs(dx) < 0.35 * r) & (abs(dy) < r)
        elif k == "triangle":
            m = (dy < r) & (dy > -r) & (abs(dx) < 0.5 * (dy + r))
        else:
            m = abs(dy) + abs(dx) < r
        x[i, 0] = m * rng.uniform(0.6, 1.0)
    x = np.clip(x + 0.15 * rng.standard_normal(x.shape).astype(np.float32), 0, 1)
    src = f"generated: {len(SHAPE_NAMES)} shapes ({', '.join(SHAPE_NAMES)}) + noise, seed 0"
    return _split("shapes", x.astype(np.float32), y.astype(np.int64), len(SHAPE_NAMES), src)


def _listing(root: Path) -> str:
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in root.iterdir())
    shown = ", ".join(names[:20]) + (f", … ({len(names)} entries)" if len(names) > 20 else "")
    return shown or "nothing (the folder is empty)"


def _find(root: Path, stem: str) -> Path | None:
    for cand in (stem, stem + ".gz", stem.replace("-idx", ".idx")):
        for base in (root, root / "raw"):
            p = base / cand
            if p.is_file():
                return p
    return None


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (the MNIST format: magic, dims, big-endian uint8 data), gzipped or not."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise DatasetError(f"{path} is not an IDX file of unsigned bytes (bad magic number)")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise DatasetError(f"{path}: header says {dims} but holds {data.size} bytes")
    return data.reshape(dims)


def _idx_dataset(name: str, root: Path) -> ImageData:
    found = {k: _find(root, v) for k, v in IDX_FILES.items()}
    missing = [IDX_FILES[k] for k, p in found.items() if p is None]
    if missing:
        raise DatasetError(
            f"{name}: {root} lacks {', '.join(missing)} (optionally .gz); it holds: "
            f"{_listing(root)}"
        )
    xs = {k: read_idx(found[k]) for k in ("train_x", "test_x")}
    ys = {k: read_idx(found[k]).astype(np.int64) for k in ("train_y", "test_y")}
    for split in ("train", "test"):
        if len(xs[f"{split}_x"]) != len(ys[f"{split}_y"]):
            raise DatasetError(f"{name}: {split} images and labels differ in count in {root}")
    return ImageData(
        name,
        (xs["train_x"][:, None] / 255.0).astype(np.float32),
        ys["train_y"],
        (xs["test_x"][:, None] / 255.0).astype(np.float32),
        ys["test_y"],
        int(max(ys["train_y"].max(), ys["test_y"].max()) + 1),
        f"IDX files in {root}",
    )


def _cifar10(root: Path) -> ImageData:
    base = root / "cifar-10-batches-py" if (root / "cifar-10-batches-py").is_dir() else root
    missing = [f for f in CIFAR_FILES if not (base / f).is_file()]
    if missing:
        raise DatasetError(
            f"cifar10: {base} lacks {', '.join(missing)} (the python pickle batches); it holds: "
            f"{_listing(base)}"
        )

    def load(f: str):
        with (base / f).open("rb") as fh:
            d = pickle.load(fh, encoding="bytes")
        try:
            x = np.asarray(d[b"data"], np.uint8).reshape(-1, 3, 32, 32)
            y = np.asarray(d[b"labels"], np.int64)
        except (KeyError, ValueError) as e:
            raise DatasetError(f"cifar10: {base / f} is not a CIFAR-10 batch ({e})") from None
        return x, y

    parts = [load(f) for f in CIFAR_FILES[:5]]
    xt, yt = load("test_batch")
    x = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    f32 = lambda a: (a / 255.0).astype(np.float32)  # noqa: E731
    return ImageData("cifar10", f32(x), y, f32(xt), yt, 10, f"CIFAR-10 python batches in {base}")


def load_dataset(
    name: str, root: str | Path | None = None, n: int | None = None, side: int | None = None
) -> ImageData:
    """Load dataset `name`.

    Args:
        name: one of DATASETS.
        root: the folder of a local dataset (mnist, fashion-mnist, cifar10).
        n: generated datasets: number of images (train + test); default 5,000.
        side: generated datasets: image side in pixels; default 16.
    """
    if name not in DATASETS:
        raise DatasetError(f"unknown dataset {name!r}: choose one of {', '.join(DATASETS)}")
    if n is not None and n < 10:
        raise DatasetError(f"n (images of a generated dataset) must be ≥ 10, got {n}")
    if side is not None and side < 4:
        raise DatasetError(f"side (pixels) must be ≥ 4, got {side}")
    if name == "digits":
        return _digits()
    if name == "synthetic":
        return _synthetic(n or 5000, side or 16)
    if name == "shapes":
        return _shapes(n or 5000, side or 16)
    if root is None:
        raise DatasetError(f"{name} is read from a local folder: give its path (--data-dir)")
    r = Path(root).expanduser()
    if not r.is_dir():
        raise DatasetError(f"{name}: {r} is not a folder")
    if name in ("mnist", "fashion-mnist"):
        return _idx_dataset(name, r)
    return _cifar10(r)
