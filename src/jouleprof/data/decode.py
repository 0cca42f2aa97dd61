"""Decoding video files to frames with PyAV.

Frames come back as numpy uint8 (T, H, W, 3) RGB. Every failure to read a clip, from a missing
file to a stream with no frame, is raised as `VideoDecodeError` naming the file and the reason,
so one bad clip in a dataset of thousands can be found and removed.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from jouleprof.errors import JouleprofError

logger = logging.getLogger(__name__)


class VideoDecodeError(JouleprofError):
    """A video file could not be opened or holds no decodable frame."""


def _open(path: Path) -> av.container.InputContainer:
    try:
        container = av.open(str(path), mode="r")
    except FileNotFoundError as e:
        raise VideoDecodeError(f"cannot read video {path}: file not found") from e
    except (av.error.FFmpegError, OSError, ValueError) as e:
        raise VideoDecodeError(
            f"cannot read video {path}: {e}; the file is damaged or not a video"
        ) from e
    if not container.streams.video:
        container.close()
        raise VideoDecodeError(f"cannot read video {path}: it holds no video stream")
    return container


def probe_frame_count(path: str | Path) -> int:
    """Number of frames of a clip's first video stream, from its metadata if it has any.

    Containers that do not store a count (some .webm, .mkv) are decoded once to count.

    Raises:
        VideoDecodeError: the file cannot be opened or has no video frame.
    """
    path = Path(path)
    container = _open(path)
    try:
        stream = container.streams.video[0]
        if stream.frames > 0:
            return int(stream.frames)
        count = sum(1 for _ in _decode(container, stream, path))
    finally:
        container.close()
    if count == 0:
        raise VideoDecodeError(f"cannot read video {path}: it holds no decodable frame")
    return count


def _decode(container: av.container.InputContainer, stream: av.VideoStream, path: Path):
    try:
        yield from container.decode(stream)
    except av.error.FFmpegError as e:
        raise VideoDecodeError(f"cannot decode video {path}: {e}") from e


def _frame_index(frame: av.VideoFrame, stream: av.VideoStream, start_pts: int) -> int | None:
    if frame.pts is None or stream.time_base is None or not stream.average_rate:
        return None
    seconds = (frame.pts - start_pts) * stream.time_base
    return round(seconds * Fraction(stream.average_rate))


def decode_frames(
    path: str | Path, indices: Sequence[int] | None = None, *, seek: bool = False
) -> np.ndarray:
    """Decodes the frames `indices` (all frames when None) of a clip as uint8 (T, H, W, 3) RGB.

    Decoding stops after the largest index. Indices may repeat (padding a short clip). An index
    beyond the clip's last frame gets the last frame, since container frame counts can overstate.

    Args:
        path: The video file.
        indices: Frame positions (0-based) to return, in the order wanted.
        seek: Seek to the key frame before the first wanted frame instead of decoding from the
            start; positions are then computed from timestamps, which assumes a constant frame
            rate. Worth it for long clips where the wanted window starts late.

    Raises:
        VideoDecodeError: the file cannot be opened, decoded, or has no frame.
    """
    path = Path(path)
    wanted = None if indices is None else [int(i) for i in indices]
    if wanted is not None and (not wanted or min(wanted) < 0):
        raise ValueError(f"indices must be non-empty and >= 0, got {indices!r}")
    container = _open(path)
    try:
        stream = container.streams.video[0]
        start_pts = stream.start_time or 0
        first = 0 if wanted is None else min(wanted)
        last = None if wanted is None else max(wanted)
        use_pts = False
        if seek and first > 0 and stream.average_rate and stream.time_base:
            offset = Fraction(first) / Fraction(stream.average_rate) / stream.time_base
            container.seek(start_pts + int(offset), stream=stream, backward=True, any_frame=False)
            use_pts = True
        frames: dict[int, np.ndarray] = {}
        keep = None if wanted is None else set(wanted)
        position = -1
        for frame in _decode(container, stream, path):
            index = _frame_index(frame, stream, start_pts) if use_pts else None
            position = index if index is not None else position + 1
            if keep is None or position in keep:
                frames[position] = frame.to_ndarray(format="rgb24")
            if last is not None and position >= last:
                break
    finally:
        container.close()
    if not frames:
        raise VideoDecodeError(f"cannot read video {path}: no decodable frame at {first} or after")
    if wanted is None:
        return np.stack([frames[i] for i in sorted(frames)])
    missing = [i for i in wanted if i not in frames]
    if missing:
        logger.debug("%s: frames %s not decoded, using the nearest earlier one", path, missing[:5])
        decoded = sorted(frames)
        for i in missing:
            # Nearest decoded frame at or before i; the first decoded one if none is earlier.
            frames[i] = frames[decoded[max(bisect.bisect_right(decoded, i) - 1, 0)]]
    return np.stack([frames[i] for i in wanted])
