"""MOD20: 20 classes of clips in one folder per class; no official split.

``data.zip`` unpacks to ``data/dataset/<class>/<clip>.mp4``; ROOT may be the unpacked folder,
its ``data`` folder, or the ``dataset`` folder itself. The label is the class folder. Clip names
usually look like ``<src>_<NN>_<a|b|c|d>_<g|s>``, but some do not: those are kept (the folder is
the label) and counted in the manifest's info, never dropped. The split is seeded and stratified
by class: ``test_fraction`` and ``val_fraction`` of each class.
"""

from __future__ import annotations

import re
from pathlib import Path

from jouleprof.data.manifests.common import (
    Manifest,
    ManifestError,
    ManifestRow,
    Skipped,
    is_video,
    readability,
    relpath,
    scan_files,
    sorted_label_ids,
    stratified_split,
)

NAME_PATTERN = re.compile(r"^.+_\d+_[abcd]_[gs]$")


def class_folder(root: Path) -> Path:
    """The folder whose subfolders are the classes."""
    for candidate in (root / "data" / "dataset", root / "dataset", root):
        if candidate.is_dir() and any(p.is_dir() for p in candidate.iterdir()):
            return candidate
    raise ManifestError(
        f"{root} holds no class folders: give the folder data.zip unpacked into "
        "(with data/dataset/<class>/<clip>.mp4) or the dataset folder itself"
    )


def build(
    root: str | Path, *, seed: int = 17, val_fraction: float = 0.15, test_fraction: float = 0.15
) -> Manifest:
    """The MOD20 manifest of the tree at `root` (paths relative to `root`)."""
    root = Path(root).expanduser().resolve()
    if not root.is_dir():
        raise ManifestError(f"MOD20 root {root} is not a folder")
    base = class_folder(root)
    clips: list[tuple[str, str]] = []
    skipped: list[Skipped] = []
    irregular: list[str] = []
    for path in scan_files(base):
        rel = relpath(path, root)
        if path.parent == base:
            skipped.append(Skipped(rel, "not inside a class folder"))
            continue
        if not is_video(path):
            skipped.append(Skipped(rel, f"not a video file ({path.suffix or 'no extension'})"))
            continue
        if path.parent.parent != base:
            skipped.append(Skipped(rel, "nested below a class folder (label unclear)"))
            continue
        why = readability(path)
        if why is not None:
            skipped.append(Skipped(rel, why))
            continue
        if not NAME_PATTERN.match(path.stem):
            irregular.append(rel)
        clips.append((rel, path.parent.name))
    if not clips:
        raise ManifestError(f"no readable clip found under {base}")
    ids = sorted_label_ids(lab for _, lab in clips)
    assign = stratified_split(
        [c for c, _ in clips],
        [lab for _, lab in clips],
        {"test": test_fraction, "val": val_fraction},
        seed,
    )
    rows = [ManifestRow(p, lab, ids[lab], assign[p]) for p, lab in clips]
    info = {
        "dataset": "mod20",
        "seed": seed,
        "val_fraction": val_fraction,
        "test_fraction": test_fraction,
        "split": "seeded, stratified by class (no official split)",
        "irregular_names": irregular,
    }
    return Manifest(rows, skipped, info)
