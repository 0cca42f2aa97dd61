"""What every manifest builder shares: rows, seeded stratified splits, writing and checking.

A manifest is a CSV with exactly the columns ``path,label,label_id,split``: ``path`` relative to
the dataset's root, ``label`` the class name, ``label_id`` an integer, ``split`` one of train,
val, test. Beside it, ``FILE.csv.json`` records where the root was and how the split was made,
so a manifest can be read (and its clips found) without repeating the root.

Pure Python and numpy: no torch, no PyAV.
"""

from __future__ import annotations

import csv
import json
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from jouleprof.errors import JouleprofError

COLUMNS: tuple[str, ...] = ("path", "label", "label_id", "split")
SPLITS: tuple[str, ...] = ("train", "val", "test")
VIDEO_EXTENSIONS: tuple[str, ...] = (".mp4", ".avi", ".mkv", ".webm", ".mov", ".mpg", ".mpeg")
SIDECAR_SUFFIX = ".json"


class ManifestError(JouleprofError, ValueError):
    """A dataset tree or a manifest cannot give a usable list of labelled clips."""


@dataclass(frozen=True)
class ManifestRow:
    """One clip of a manifest."""

    path: str
    """Path relative to the dataset root, with '/' separators (the row's key)."""
    label: str
    """Class name."""
    label_id: int
    """Integer class: 0-based in sorted class order (MOD20, ERA), the action number (UAV-Human)."""
    split: str
    """train, val or test."""
    group: str | None = None
    """What clips belong together (a UAV-Human subject); not written to the CSV."""


@dataclass(frozen=True)
class Skipped:
    """A file the builder saw and could not use, with the reason."""

    path: str
    reason: str


@dataclass
class Manifest:
    """A built manifest: its rows, the files it could not use, and how it was made."""

    rows: list[ManifestRow]
    skipped: list[Skipped] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in SPLITS}
        for r in self.rows:
            out[r.split] += 1
        return out


def relpath(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def scan_files(root: Path) -> list[Path]:
    """Every regular file under `root`, sorted, hidden files and folders left out."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if not name.startswith("."):
                out.append(Path(dirpath) / name)
    return out


def readability(path: Path) -> str | None:
    """Why `path` cannot be a clip (empty, unreadable), or None when it looks usable."""
    try:
        size = path.stat().st_size
    except OSError as e:
        return f"cannot stat: {e.strerror or e}"
    if size == 0:
        return "empty file (0 bytes)"
    if not os.access(path, os.R_OK):
        return "not readable (permission denied)"
    return None


def is_video(path: Path) -> bool:
    return path.suffix.lower() in VIDEO_EXTENSIONS


def stratified_split(
    keys: Sequence[str],
    labels: Sequence[str],
    fractions: dict[str, float],
    seed: int,
    rest: str = "train",
) -> dict[str, str]:
    """Assigns each key a split: per label, a seeded shuffle and cut by `fractions`.

    Each split in `fractions` gets round(fraction × n) clips of every label with n clips (at
    least one when the label has enough clips for every split and `rest` to keep one), and
    `rest` gets the remainder. Deterministic given the keys, labels and seed, and independent of
    the order of the input.
    """
    if sum(fractions.values()) >= 1.0:
        raise ManifestError(f"split fractions {fractions} leave nothing for {rest!r}")
    by_label: dict[str, list[str]] = defaultdict(list)
    for k, lab in zip(keys, labels, strict=True):
        by_label[lab].append(k)
    out: dict[str, str] = {}
    for i, lab in enumerate(sorted(by_label)):
        members = sorted(by_label[lab])
        rng = np.random.default_rng([seed, i, len(members)])
        order = [members[j] for j in rng.permutation(len(members))]
        start = 0
        for split, frac in fractions.items():
            n = round(frac * len(order))
            if n == 0 and frac > 0 and len(order) > len(fractions):
                n = 1
            for k in order[start : start + n]:
                out[k] = split
            start += n
        for k in order[start:]:
            out[k] = rest
    return out


def group_split(
    keys: Sequence[str], groups: Sequence[str], fraction: float, seed: int, split: str, rest: str
) -> dict[str, str]:
    """Assigns whole groups (e.g. subjects) to `split`, about `fraction` of the groups, seeded."""
    names = sorted(set(groups))
    rng = np.random.default_rng([seed, len(names)])
    n = max(1, round(fraction * len(names))) if fraction > 0 and len(names) > 1 else 0
    chosen = {names[j] for j in rng.permutation(len(names))[:n]}
    return {k: (split if g in chosen else rest) for k, g in zip(keys, groups, strict=True)}


def carve_validation(
    rows: list[ManifestRow], fraction: float, seed: int, by: str = "clip"
) -> list[ManifestRow]:
    """Moves a seeded, label-stratified `fraction` of the train rows to val.

    by: "clip" (stratified by label) or "group" (whole groups, e.g. subject-disjoint).
    """
    if not 0 <= fraction < 1:
        raise ManifestError(f"val_fraction must be in [0, 1), got {fraction}")
    train = [r for r in rows if r.split == "train"]
    if fraction == 0 or not train:
        return rows
    keys = [r.path for r in train]
    if by == "clip":
        assign = stratified_split(keys, [r.label for r in train], {"val": fraction}, seed)
    elif by == "group":
        assign = group_split(keys, [r.group or "" for r in train], fraction, seed, "val", "train")
    else:
        raise ManifestError(f"val split by {by!r}: choose clip or group")
    return [
        ManifestRow(r.path, r.label, r.label_id, assign[r.path], r.group)
        if r.split == "train"
        else r
        for r in rows
    ]


def sorted_label_ids(labels: Iterable[str]) -> dict[str, int]:
    """0-based ids in sorted class order."""
    return {lab: i for i, lab in enumerate(sorted(set(labels)))}


def sidecar_path(csv_path: Path) -> Path:
    return csv_path.with_name(csv_path.name + SIDECAR_SUFFIX)


def write_manifest(manifest: Manifest, out: str | os.PathLike[str], root: Path) -> Path:
    """Writes the CSV (sorted by split, then path), its sidecar JSON and, when files were
    skipped, ``FILE.skipped.csv`` (path,reason). Atomic: a reader never sees half a file."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    order = {s: i for i, s in enumerate(SPLITS)}
    rows = sorted(manifest.rows, key=lambda r: (order[r.split], r.path))
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow((r.path, r.label, r.label_id, r.split))
    os.replace(tmp, out)
    skipped_path = out.with_name(out.stem + ".skipped.csv")
    if manifest.skipped:
        with skipped_path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(("path", "reason"))
            for s in manifest.skipped:
                w.writerow((s.path, s.reason))
    elif skipped_path.exists():
        skipped_path.unlink()
    side = {
        "root": str(root.resolve()),
        "counts": manifest.counts(),
        "classes": len({r.label for r in manifest.rows}),
        "skipped": len(manifest.skipped),
        **manifest.info,
    }
    sidecar_path(out).write_text(json.dumps(side, indent=1) + "\n")
    return out
