"""ERA: 25 event classes with an official train/test split.

Clips are named ``<Class>_<NNN>.mp4`` and their numbers restart in each split, so the same
basename exists in train and test: every row is keyed on its path relative to ROOT, never its
basename. The split folders are found by name (``train``/``test``, any case, up to two levels
below ROOT); inside one, a clip's class is its folder, or, where clips lie directly in the split
folder, the name before ``_NNN``. Validation is carved from train (seeded, stratified).
"""

from __future__ import annotations

import re
from pathlib import Path

from jouleprof.data.manifests.common import (
    Manifest,
    ManifestError,
    ManifestRow,
    Skipped,
    carve_validation,
    is_video,
    readability,
    relpath,
    scan_files,
    sorted_label_ids,
)

NAME_PATTERN = re.compile(r"^(?P<cls>.+?)_(?P<num>\d+)$")
SPLIT_NAMES = {"train": "train", "training": "train", "test": "test", "testing": "test"}


def split_folders(root: Path) -> dict[str, Path]:
    """{'train': folder, 'test': folder} found at ROOT or up to two levels below."""
    found: dict[str, Path] = {}
    levels = [root] + sorted(p for p in root.iterdir() if p.is_dir())
    for parent in levels:
        for child in sorted(p for p in parent.iterdir() if p.is_dir()):
            split = SPLIT_NAMES.get(child.name.lower())
            if split and split not in found:
                found[split] = child
        if len(found) == 2:
            return found
    raise ManifestError(
        f"{root} has no train and test folders (found {sorted(found) or 'none'}): give the "
        "folder that holds ERA's official Train/ and Test/ folders"
    )


def build(root: str | Path, *, seed: int = 17, val_fraction: float = 0.15) -> Manifest:
    """The ERA manifest of the tree at `root` (paths relative to `root`)."""
    root = Path(root).expanduser().resolve()
    if not root.is_dir():
        raise ManifestError(f"ERA root {root} is not a folder")
    folders = split_folders(root)
    clips: list[tuple[str, str, str]] = []
    skipped: list[Skipped] = []
    mismatched: list[str] = []
    for split, folder in folders.items():
        for path in scan_files(folder):
            rel = relpath(path, root)
            if not is_video(path):
                skipped.append(Skipped(rel, f"not a video file ({path.suffix or 'no extension'})"))
                continue
            why = readability(path)
            if why is not None:
                skipped.append(Skipped(rel, why))
                continue
            m = NAME_PATTERN.match(path.stem)
            if path.parent != folder:
                label = path.relative_to(folder).parts[0]
                if m and m["cls"].lower() != label.lower():
                    mismatched.append(rel)
            elif m:
                label = m["cls"]
            else:
                skipped.append(
                    Skipped(rel, "in the split folder itself, and its name is not <Class>_<NNN>")
                )
                continue
            clips.append((rel, label, split))
    if not clips:
        raise ManifestError(f"no readable clip found under {sorted(map(str, folders.values()))}")
    ids = sorted_label_ids(lab for _, lab, _ in clips)
    rows = [ManifestRow(p, lab, ids[lab], s) for p, lab, s in clips]
    rows = carve_validation(rows, val_fraction, seed)
    info = {
        "dataset": "era",
        "seed": seed,
        "val_fraction": val_fraction,
        "split": "official train/test; val carved from train (seeded, stratified)",
        "split_folders": {k: relpath(v, root) for k, v in folders.items()},
        "name_folder_mismatch": mismatched,
    }
    return Manifest(rows, skipped, info)
