"""Manifest builders for the video datasets users download themselves (MOD20, ERA, UAV-Human).

Each builder walks a dataset's folder and returns a `Manifest` (rows path,label,label_id,split
and the files it could not use); `write_manifest` stores it, `load_manifest` reads and checks it.
"""

from __future__ import annotations

from jouleprof.data.manifests.common import (
    COLUMNS,
    SPLITS,
    Manifest,
    ManifestError,
    ManifestRow,
    Skipped,
    write_manifest,
)
from jouleprof.data.manifests.load import LoadedManifest, load_manifest

DATASETS: tuple[str, ...] = ("mod20", "era", "uavhuman")


def build_manifest(dataset: str, root, **options) -> Manifest:
    """Builds the manifest of `dataset` (mod20, era, uavhuman) at `root`."""
    import importlib

    if dataset not in DATASETS:
        raise ManifestError(f"unknown dataset {dataset!r}: choose one of {', '.join(DATASETS)}")
    return importlib.import_module(f"jouleprof.data.manifests.{dataset}").build(root, **options)


__all__ = [
    "COLUMNS",
    "DATASETS",
    "SPLITS",
    "LoadedManifest",
    "Manifest",
    "ManifestError",
    "ManifestRow",
    "Skipped",
    "build_manifest",
    "load_manifest",
    "write_manifest",
]
