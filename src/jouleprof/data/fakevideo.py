"""FakeVideo: synthetic clips encoded once with PyAV, then decoded for real on every read.

Synthesis draws smooth moving colour patterns (a drifting gradient and a square on a circular
path, colours from the seed), encodes them as H.264 (libx264; MPEG-4 Part 2 where the PyAV build
lacks it) in yuv420p, and caches the files under a folder named by a hash of the synthesis
parameters. A later run with the same parameters finds the folder, checks its manifest and
sizes, and skips synthesis. The Dataset then does the work a real dataset does every epoch:
decode, temporal sampling, random resized crop, normalization (see `clipdataset.py`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import numpy as np

from jouleprof.cache import cache_root, key_of
from jouleprof.data.clipdataset import VideoClipDataset
from jouleprof.errors import ConfigError

logger = logging.getLogger(__name__)

CODECS: tuple[str, ...] = ("auto", "libx264", "mpeg4")
MANIFEST = "manifest.json"
FORMAT_VERSION = 1  # bump when the pattern or the encoder settings change


@dataclass(frozen=True)
class FakeVideoSpec:
    """What to synthesize; every field is part of the cache key."""

    num_clips: int = 16
    """Number of distinct clips."""
    frames_per_clip: int = 64
    """Frames per clip (16 frames at stride 4 span 61)."""
    height_px: int = 256
    """Frame height; even, as yuv420p needs."""
    width_px: int = 256
    """Frame width; even, as yuv420p needs."""
    fps: int = 30
    """Frame rate written to the container."""
    codec: str = "auto"
    """'libx264', 'mpeg4', or 'auto': libx264 when the PyAV build has it, else mpeg4."""
    seed: int = 0
    """Seed of the colours and motion."""

    def __post_init__(self) -> None:
        for name in ("num_clips", "frames_per_clip", "height_px", "width_px", "fps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        for name in ("height_px", "width_px"):
            if getattr(self, name) % 2:
                raise ConfigError(f"{name} must be even (yuv420p), got {getattr(self, name)!r}")
        if self.codec not in CODECS:
            raise ConfigError(f"codec must be one of {CODECS}, got {self.codec!r}")

    def resolved_codec(self) -> str:
        """The codec actually used: 'auto' resolved against this PyAV build."""
        if self.codec != "auto":
            return self.codec
        return "libx264" if "libx264" in av.codecs_available else "mpeg4"

    def key(self) -> str:
        """Short hash naming the cache folder of these parameters."""
        fields: dict[str, Any] = dataclasses.asdict(self)
        fields["codec"] = self.resolved_codec()
        fields["format_version"] = FORMAT_VERSION
        return key_of(fields)


def pattern_frames(spec: FakeVideoSpec, clip_index: int) -> np.ndarray:
    """The uint8 (T, H, W, 3) RGB frames of clip `clip_index`, deterministic given the spec."""
    rng = np.random.default_rng([spec.seed, clip_index])
    colours = rng.uniform(30, 225, size=(3, 3))  # gradient ends and square, kept off the rails
    speed = rng.uniform(0.5, 2.0)
    t = np.arange(spec.frames_per_clip, dtype=np.float32)[:, None, None]
    y = np.linspace(0.0, 1.0, spec.height_px, dtype=np.float32)[None, :, None]
    x = np.linspace(0.0, 1.0, spec.width_px, dtype=np.float32)[None, None, :]
    # A smooth wave drifting with time: low frequencies survive compression almost intact.
    wave = 0.5 + 0.5 * np.sin(2 * np.pi * (0.6 * x + 0.4 * y + speed * t / spec.frames_per_clip))
    frames = colours[0] + (colours[1] - colours[0]) * wave[..., None]
    # A square on a circular path, so consecutive frames differ locally too.
    angle = 2 * np.pi * speed * t[:, 0, 0] / spec.frames_per_clip
    cy = 0.5 + 0.25 * np.sin(angle)
    cx = 0.5 + 0.25 * np.cos(angle)
    half = 0.12
    inside = (np.abs(y - cy[:, None, None]) < half) & (np.abs(x - cx[:, None, None]) < half)
    frames = np.where(inside[..., None], colours[2], frames)
    return np.clip(np.rint(frames), 0, 255).astype(np.uint8)


def encode_clip(path: Path, frames: np.ndarray, fps: int, codec: str) -> None:
    """Writes uint8 (T, H, W, 3) RGB frames to `path` as yuv420p video."""
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.height, stream.width = int(frames.shape[1]), int(frames.shape[2])
        stream.pix_fmt = "yuv420p"
        if codec == "libx264":
            stream.options = {"crf": "18", "preset": "veryfast"}
        else:
            stream.bit_rate = 20_000_000  # high enough that the decode test's tolerance holds
        for array in frames:
            frame = av.VideoFrame.from_ndarray(array, format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))


def default_cache_dir() -> Path:
    """The FakeVideo cache folder: `fakevideo` under jouleprof's cache root (`jouleprof.cache`)."""
    return cache_root() / "fakevideo"


def _cached_paths(folder: Path, spec: FakeVideoSpec) -> list[Path] | None:
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if manifest.get("key") != spec.key():
        return None
    paths = []
    for entry in manifest.get("files", []):
        path = folder / entry["name"]
        if not path.is_file() or path.stat().st_size != entry["size_bytes"]:
            return None
        paths.append(path)
    return paths if len(paths) == spec.num_clips else None


def synthesize(spec: FakeVideoSpec, cache_dir: str | Path | None = None) -> list[Path]:
    """The clip files of `spec`, synthesized now unless a valid cached copy exists.

    Writes into a temporary sibling folder and renames it into place, so an interrupted or
    concurrent synthesis never leaves a half-written cache that looks valid.
    """
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder = root / spec.key()
    cached = _cached_paths(folder, spec)
    if cached is not None:
        logger.debug("FakeVideo: reusing %d clips in %s", len(cached), folder)
        return cached
    codec = spec.resolved_codec()
    logger.info("FakeVideo: synthesizing %d clips (%s) into %s", spec.num_clips, codec, folder)
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{spec.key()}.", dir=root))
    try:
        files = []
        for i in range(spec.num_clips):
            name = f"clip_{i:04d}.mp4"
            encode_clip(staging / name, pattern_frames(spec, i), spec.fps, codec)
            files.append({"name": name, "size_bytes": (staging / name).stat().st_size})
        manifest = {"key": spec.key(), "spec": dataclasses.asdict(spec), "codec": codec}
        manifest["files"] = files
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1))
        if (theirs := _cached_paths(folder, spec)) is not None:
            # Another process finished first (two study cells starting at once): keep its
            # copy, which its loader may already be reading, and drop ours.
            return theirs
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)  # an invalid or stale cache
        try:
            staging.rename(folder)
        except OSError:
            # Another process won the race; use its copy if it is valid.
            if _cached_paths(folder, spec) is None:
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    paths = _cached_paths(folder, spec)
    assert paths is not None, "a freshly written FakeVideo cache must validate"
    return paths


class FakeVideo(VideoClipDataset):
    """A VideoClipDataset over synthesized clips (synthesized on first use, then cached).

    Args:
        spec: What to synthesize.
        num_frames: Frames per training clip.
        frame_stride: Distance between sampled frames.
        crop_px: Side of the output crop.
        cache_dir: Where synthesized clips are kept (default: `default_cache_dir()`).
        **kwargs: Passed on to `VideoClipDataset` (scale, ratio, hflip, mean, std, seed...).
    """

    def __init__(
        self,
        spec: FakeVideoSpec,
        num_frames: int,
        frame_stride: int,
        crop_px: int,
        *,
        cache_dir: str | Path | None = None,
        **kwargs: Any,
    ) -> None:
        self.spec = spec
        super().__init__(synthesize(spec, cache_dir), num_frames, frame_stride, crop_px, **kwargs)
