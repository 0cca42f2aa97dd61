"""Decode each clip of a manifest once into a uint8 frame cache (PyAV), resumable.

A cache is a folder::

    CACHE/cache.json           the spec (frames kept, frame size) and the manifest it serves
    CACHE/clips/<key>.npy      one clip: uint8 (T, H, W, 3) RGB, T ≤ spec.num_frames
    CACHE/errors.csv           path,reason of clips that could not be decoded (last pass)

``<key>`` hashes the clip's path relative to the dataset root (ERA repeats basenames across its
splits). Each clip is written to a temporary file and renamed into place, so an interrupted
pass leaves only whole clips; the next pass skips them and decodes the rest. Frames kept are
spread evenly over the whole clip, resized so the short side is ``size_px``: training then draws
its frames from them (`video_dataset.segment_indices`) with no further decoding.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from jouleprof.errors import JouleprofError

CACHE_JSON = "cache.json"
ERRORS_CSV = "errors.csv"
CLIPS_DIR = "clips"
FORMAT_VERSION = 1


class CacheError(JouleprofError, ValueError):
    """A frame cache does not match what was asked of it, or cannot be written."""


@dataclass(frozen=True)
class CacheSpec:
    """What a frame cache keeps of every clip."""

    num_frames: int = 32
    """Frames kept per clip, spread evenly over it (all frames of a shorter clip)."""
    size_px: int = 256
    """Short side of the kept frames, in pixels (the long side keeps the aspect ratio)."""

    def __post_init__(self) -> None:
        if self.num_frames < 1:
            raise CacheError(f"num_frames must be ≥ 1, got {self.num_frames}")
        if self.size_px < 8:
            raise CacheError(f"size_px must be ≥ 8, got {self.size_px}")


def clip_key(relpath: str) -> str:
    """File stem of a clip in the cache: a hash of its relative path, then its basename."""
    digest = hashlib.sha1(relpath.encode()).hexdigest()[:12]
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(relpath).stem)[:40]
    return f"{digest}_{stem}"


def even_indices(total: int, n: int) -> np.ndarray:
    """`n` frame positions spread evenly over `total` frames (all of them when total ≤ n)."""
    if total <= n:
        return np.arange(total, dtype=np.int64)
    return np.round(np.linspace(0, total - 1, n)).astype(np.int64)


def resize_short_side(frames: np.ndarray, size_px: int) -> np.ndarray:
    """uint8 (T, H, W, 3) frames resized (antialiased) so min(H, W) == size_px."""
    import torch
    import torch.nn.functional as F

    h, w = frames.shape[1:3]
    scale = size_px / min(h, w)
    new = (max(1, round(h * scale)), max(1, round(w * scale)))
    if new == (h, w):
        return np.ascontiguousarray(frames)
    x = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float()
    y = F.interpolate(x, size=new, mode="bilinear", antialias=True, align_corners=False)
    return y.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous().numpy()


def decode_clip(path: Path, spec: CacheSpec) -> np.ndarray:
    """The cached form of one clip: evenly spread frames at the spec's size (PyAV decode)."""
    from jouleprof.data.decode import decode_frames, probe_frame_count

    idx = even_indices(probe_frame_count(path), spec.num_frames)
    return resize_short_side(decode_frames(path, idx), spec.size_px)


def _write_npy(path: Path, array: np.ndarray) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as f:
        np.save(f, array)
    os.replace(tmp, path)


def _valid_npy(path: Path) -> bool:
    """A whole cached clip: its header reads and its size matches the header's shape."""
    try:
        with path.open("rb") as f:
            version = np.lib.format.read_magic(f)
            read = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, _, dtype = read(f)
            offset = f.tell()
        return dtype == np.uint8 and path.stat().st_size == offset + int(np.prod(shape))
    except (OSError, ValueError):
        return False


@dataclass
class CacheReport:
    """What a pass over a manifest did."""

    decoded: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)


class FrameCache:
    """A frame cache folder (see the module docstring)."""

    def __init__(self, folder: str | os.PathLike[str], spec: CacheSpec | None = None) -> None:
        self.folder = Path(folder)
        meta = self.folder / CACHE_JSON
        stored = None
        if meta.is_file():
            try:
                stored = json.loads(meta.read_text())
            except ValueError as e:
                raise CacheError(f"{meta} is not valid JSON ({e}): remove the cache folder") from e
        if stored is not None:
            if stored.get("format_version") != FORMAT_VERSION:
                raise CacheError(f"{self.folder} was written by another cache format: rebuild it")
            old = CacheSpec(**stored["spec"])
            if spec is not None and spec != old:
                raise CacheError(
                    f"{self.folder} holds frames cached with {asdict(old)}, not {asdict(spec)}: "
                    "give another cache folder, or the same settings"
                )
            spec = old
        self.spec = spec or CacheSpec()

    def path_of(self, relpath: str) -> Path:
        return self.folder / CLIPS_DIR / f"{clip_key(relpath)}.npy"

    def has(self, relpath: str) -> bool:
        return _valid_npy(self.path_of(relpath))

    def load(self, relpath: str, mmap: bool = True) -> np.ndarray:
        """The cached frames of a clip, uint8 (T, H, W, 3) (memory-mapped by default)."""
        p = self.path_of(relpath)
        if not p.is_file():
            raise CacheError(
                f"clip {relpath} is not in the frame cache {self.folder}: run "
                f"`jouleprof data cache MANIFEST --out {self.folder}` (it resumes)"
            )
        return np.load(p, mmap_mode="r" if mmap else None)

    def _init(self, manifest_path: Path | None) -> None:
        (self.folder / CLIPS_DIR).mkdir(parents=True, exist_ok=True)
        meta = self.folder / CACHE_JSON
        if not meta.is_file():
            body = {
                "format_version": FORMAT_VERSION,
                "spec": asdict(self.spec),
                "manifest": None if manifest_path is None else str(manifest_path),
            }
            meta.write_text(json.dumps(body, indent=1) + "\n")

    def build(
        self,
        clips: Sequence[tuple[str, Path]],
        *,
        workers: int = 1,
        manifest_path: Path | None = None,
        on_clip: Callable[[str, str], None] | None = None,
        decode: Callable[[Path, CacheSpec], np.ndarray] = decode_clip,
    ) -> CacheReport:
        """Decodes every (relpath, abspath) not yet cached; failures are listed, never fatal.

        Args:
            clips: The clips, by relative path (the key) and file.
            workers: Decoding processes (1: in this process).
            manifest_path: Recorded in cache.json.
            on_clip: Called with (relpath, "decoded" | "reused" | "failed") after each clip.
            decode: The decoder (a test may pass a fake one; workers > 1 needs a picklable one).
        """
        self._init(manifest_path)
        report = CacheReport()
        todo = []
        for rel, path in clips:
            if self.has(rel):
                report.reused.append(rel)
                if on_clip:
                    on_clip(rel, "reused")
            else:
                todo.append((rel, Path(path)))

        def done(rel: str, error: str | None) -> None:
            if error is None:
                report.decoded.append(rel)
            else:
                report.failed.append((rel, error))
            if on_clip:
                on_clip(rel, "decoded" if error is None else "failed")

        if workers <= 1:
            for rel, path in todo:
                done(rel, _cache_one(self.path_of(rel), path, self.spec, decode))
        else:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(max_workers=workers) as pool:
                futures = {
                    pool.submit(_cache_one, self.path_of(rel), path, self.spec, decode): rel
                    for rel, path in todo
                }
                from concurrent.futures import as_completed

                for fut in as_completed(futures):
                    done(futures[fut], fut.result())
        self._write_errors(report.failed)
        return report

    def _write_errors(self, failed: list[tuple[str, str]]) -> None:
        p = self.folder / ERRORS_CSV
        if not failed:
            p.unlink(missing_ok=True)
            return
        with p.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(("path", "reason"))
            w.writerows(sorted(failed))


def _cache_one(target: Path, path: Path, spec: CacheSpec, decode) -> str | None:
    """Decode and store one clip; the error message, or None on success."""
    from jouleprof.errors import JouleprofError as _Err

    try:
        frames = decode(path, spec)
        if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
            return f"decoder returned {frames.dtype} {frames.shape}, not uint8 (T, H, W, 3)"
        _write_npy(target, frames)
    except (_Err, OSError, ValueError, RuntimeError) as e:
        return f"{type(e).__name__}: {e}"
    return None
