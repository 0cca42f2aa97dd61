"""The frame cache: a real PyAV round trip, resume after an interruption, training reads."""

from __future__ import annotations

import numpy as np
import pytest

from jouleprof.data.cache import CacheError, CacheSpec, FrameCache, decode_clip, even_indices
from jouleprof.data.manifests.common import ManifestRow
from jouleprof.data.video_dataset import CachedClipDataset, normalize, segment_indices

av = pytest.importorskip("av")


def encode(path, frames, fps=10):
    from jouleprof.data.fakevideo import encode_clip

    encode_clip(path, frames, fps, "mpeg4")


def gradient_clip(t=20, h=48, w=64, seed=0):
    rng = np.random.default_rng(seed)
    base = rng.uniform(40, 200, size=3)
    y = np.linspace(0, 1, h)[None, :, None, None]
    x = np.linspace(0, 1, w)[None, None, :, None]
    tt = np.arange(t)[:, None, None, None] / t
    return np.clip(base + 40 * np.sin(6 * x + 3 * y + 6 * tt), 0, 255).astype(np.uint8)


def test_round_trip_keeps_evenly_spread_frames_resized(tmp_path):
    frames = gradient_clip()
    encode(tmp_path / "a.mp4", frames)
    cache = FrameCache(tmp_path / "cache", CacheSpec(num_frames=8, size_px=24))
    report = cache.build([("x/a.mp4", tmp_path / "a.mp4")])
    assert report.decoded == ["x/a.mp4"] and not report.failed
    got = cache.load("x/a.mp4")
    assert got.dtype == np.uint8 and got.shape == (8, 24, 32, 3)  # short side 24, aspect kept
    # Against the source frames at the same positions, downsized the same way.
    from jouleprof.data.cache import resize_short_side

    want = resize_short_side(frames[even_indices(20, 8)], 24).astype(float)
    assert np.abs(got.astype(float) - want).mean() < 6.0  # codec loss only
    assert np.allclose(decode_clip(tmp_path / "a.mp4", cache.spec), got)


def test_resume_after_interruption_and_damage(tmp_path):
    clips = []
    for i in range(5):
        encode(tmp_path / f"c{i}.mp4", gradient_clip(t=12, seed=i))
        clips.append((f"split/c{i}.mp4", tmp_path / f"c{i}.mp4"))
    calls = []

    def interrupted(path, spec):
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(path.name)
        return decode_clip(path, spec)

    cache = FrameCache(tmp_path / "cache", CacheSpec(num_frames=4, size_px=16))
    with pytest.raises(KeyboardInterrupt):
        cache.build(clips, decode=interrupted)
    assert [cache.has(rel) for rel, _ in clips] == [True, True, True, False, False]
    # A truncated clip file (killed mid-write elsewhere) is decoded again, not trusted.
    damaged = cache.path_of("split/c1.mp4")
    damaged.write_bytes(damaged.read_bytes()[:-10])
    (tmp_path / "c4.mp4").write_bytes(b"not a video")
    again = FrameCache(tmp_path / "cache")  # the spec comes from cache.json
    assert again.spec == CacheSpec(num_frames=4, size_px=16)
    report = again.build(clips)
    assert sorted(report.reused) == ["split/c0.mp4", "split/c2.mp4"]
    assert sorted(report.decoded) == ["split/c1.mp4", "split/c3.mp4"]
    assert [rel for rel, _ in report.failed] == ["split/c4.mp4"]
    assert "c4.mp4" in (tmp_path / "cache" / "errors.csv").read_text()
    with pytest.raises(CacheError, match="same settings"):
        FrameCache(tmp_path / "cache", CacheSpec(num_frames=8, size_px=16))


def test_dataset_samples_segments_and_crops(tmp_path):
    cache = FrameCache(tmp_path / "cache", CacheSpec(num_frames=12, size_px=40))
    clip = np.stack([np.full((40, 60, 3), 10 * i, np.uint8) for i in range(12)])
    cache.build([("a.mp4", tmp_path / "a.mp4")], decode=lambda p, s: clip)
    rows = [ManifestRow("a.mp4", "cat", 3, "train")]
    ev = CachedClipDataset(rows, cache, num_frames=4, size_px=32, train=False)
    x, y = ev[0]
    assert y == 3 and tuple(x.shape) == (4, 3, 32, 32) and str(x.dtype) == "torch.uint8"
    # Centred in each of 4 segments of 12 frames: frames 1, 4, 7, 10.
    assert [int(x[t, 0, 0, 0]) for t in range(4)] == [10, 40, 70, 100]
    tr = CachedClipDataset(rows, cache, num_frames=4, size_px=32, train=True, seed=1)
    starts = {tuple(int(tr[0][0][t, 0, 0, 0]) for t in range(4)) for _ in range(10)}
    assert len(starts) > 1  # random within segments
    for s in starts:
        assert all(30 * k <= v < 30 * (k + 1) for k, v in enumerate(s))
    z = normalize(x[None], (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    assert abs(float(z[0, 1, 0, 0, 0]) - (40 / 255 - 0.5) / 0.25) < 1e-5
    with pytest.raises(CacheError, match="not in the frame cache"):
        CachedClipDataset([ManifestRow("b.mp4", "cat", 3, "train")], cache, 4, 32, train=False)


def test_segment_indices_cover_short_clips():
    assert list(segment_indices(3, 6, None)) == [0, 0, 1, 1, 2, 2]
    rng = np.random.default_rng(0)
    assert all(0 <= i < 100 for i in segment_indices(100, 16, rng))
