"""FakeVideo synthesis and cache, PyAV decoding, clip sources, and the clip transforms."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("av", reason="PyAV is the optional 'video' extra")

from jouleprof.data.clipdataset import VideoClipDataset
from jouleprof.data.clips import ClipSourceError, clips_from_csv, clips_from_folder, find_clips
from jouleprof.data.decode import VideoDecodeError, decode_frames, probe_frame_count
from jouleprof.data.fakevideo import FakeVideo, FakeVideoSpec, pattern_frames, synthesize
from jouleprof.data.transforms import random_resized_crop_box, sample_frame_indices

SPEC = FakeVideoSpec(num_clips=2, frames_per_clip=12, height_px=48, width_px=64, seed=7)
# H.264 at crf 18 / MPEG-4 at 20 Mb/s on smooth patterns: a few levels of 255 on average.
MAX_MEAN_ABS_ERROR = 6.0


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    return synthesize(SPEC, tmp_path_factory.mktemp("cache"))


def test_decoder_returns_what_the_encoder_wrote(clips):
    assert len(clips) == SPEC.num_clips
    for i, path in enumerate(clips):
        frames = decode_frames(path)
        expected = pattern_frames(SPEC, i)
        assert frames.shape == expected.shape == (12, 48, 64, 3) and frames.dtype == np.uint8
        assert np.abs(frames.astype(float) - expected).mean() < MAX_MEAN_ABS_ERROR
        assert probe_frame_count(path) == 12
    # Consecutive frames differ (the pattern moves) and clips differ (the seed picks colours).
    assert np.abs(np.diff(pattern_frames(SPEC, 0).astype(float), axis=0)).mean() > 1.0
    assert not np.array_equal(pattern_frames(SPEC, 0), pattern_frames(SPEC, 1))


@pytest.mark.parametrize("seek", [False, True])
def test_decoding_selected_frames(clips, seek):
    expected = pattern_frames(SPEC, 0)
    wanted = [9, 2, 2, 11] if not seek else [8, 9, 10, 11]
    frames = decode_frames(clips[0], wanted, seek=seek)
    assert frames.shape[0] == 4
    assert np.abs(frames.astype(float) - expected[wanted]).mean() < MAX_MEAN_ABS_ERROR
    # Beyond the end: the last frame, since container counts may overstate.
    tail = decode_frames(clips[0], [11, 40])
    np.testing.assert_array_equal(tail[0], tail[1])


@pytest.mark.parametrize("codec", ["libx264", "mpeg4"])
def test_both_codecs_round_trip(tmp_path, codec):
    spec = FakeVideoSpec(num_clips=1, frames_per_clip=4, height_px=32, width_px=32, codec=codec)
    (path,) = synthesize(spec, tmp_path)
    error = np.abs(decode_frames(path).astype(float) - pattern_frames(spec, 0)).mean()
    assert error < MAX_MEAN_ABS_ERROR


def test_the_cache_is_reused_and_repaired(tmp_path):
    first = synthesize(SPEC, tmp_path)
    stamps = [p.stat().st_mtime_ns for p in first]
    again = synthesize(SPEC, tmp_path)
    assert again == first and [p.stat().st_mtime_ns for p in again] == stamps
    other = synthesize(
        FakeVideoSpec(num_clips=1, frames_per_clip=4, height_px=32, width_px=32), tmp_path
    )
    assert other[0].parent != first[0].parent  # different parameters, different folder
    first[1].write_bytes(b"truncated")  # a damaged cache is detected and rebuilt
    repaired = synthesize(SPEC, tmp_path)
    assert probe_frame_count(repaired[1]) == SPEC.frames_per_clip
    assert not list(tmp_path.glob(f"{SPEC.key()}.*")), "no staging folder left behind"


def test_a_cache_finished_by_another_process_meanwhile_is_kept(tmp_path, monkeypatch):
    # Two study cells start at once and both synthesize: the one that finishes second must
    # not replace the first one's cache, which that cell's loader may be reading already.
    from jouleprof.data import fakevideo

    spec = FakeVideoSpec(num_clips=1, frames_per_clip=4, height_px=32, width_px=32)
    first = synthesize(spec, tmp_path)
    inode = first[0].stat().st_ino
    real = fakevideo._cached_paths
    calls = []

    def not_there_yet(folder, s):  # the second process's first look, before the first finished
        calls.append(folder)
        return None if len(calls) == 1 else real(folder, s)

    monkeypatch.setattr(fakevideo, "_cached_paths", not_there_yet)
    second = synthesize(spec, tmp_path)
    assert second == first and second[0].stat().st_ino == inode
    assert [p.name for p in tmp_path.iterdir()] == [first[0].parent.name]  # no staging left


def test_unreadable_clip_names_the_file(tmp_path):
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(VideoDecodeError, match="broken.mp4"):
        decode_frames(bad)
    with pytest.raises(VideoDecodeError, match="broken.mp4"):
        probe_frame_count(bad)
    with pytest.raises(VideoDecodeError, match="missing.mp4.*not found"):
        decode_frames(tmp_path / "missing.mp4")


def test_empty_folder_names_the_folder_and_extensions(tmp_path):
    (tmp_path / "notes.txt").write_text("no video here")
    with pytest.raises(ClipSourceError, match=rf"{tmp_path}.*\.avi.*\.mkv.*\.mp4.*\.webm"):
        clips_from_folder(tmp_path)
    with pytest.raises(ClipSourceError, match="does not exist"):
        clips_from_folder(tmp_path / "nowhere")


def test_folder_is_searched_recursively(tmp_path, clips):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "x.MP4").write_bytes(clips[0].read_bytes())
    (tmp_path / "y.avi").write_bytes(b"")
    (tmp_path / "z.txt").write_text("")
    found = [e.path.name for e in find_clips(tmp_path)]
    assert found == ["x.MP4", "y.avi"]


def test_csv_source_resolves_relative_paths(tmp_path, clips):
    (tmp_path / "videos").mkdir()
    (tmp_path / "videos" / "c.mp4").write_bytes(clips[0].read_bytes())
    csv_path = tmp_path / "list.csv"
    csv_path.write_text(f"path,label\nvideos/c.mp4,run\n{clips[1]},\n")
    entries = find_clips(csv_path)
    assert entries[0].path == (tmp_path / "videos" / "c.mp4").resolve()
    assert [e.label for e in entries] == ["run", None]
    (tmp_path / "bad.csv").write_text("file\nx.mp4\n")
    with pytest.raises(ClipSourceError, match="no 'path' column"):
        clips_from_csv(tmp_path / "bad.csv")
    (tmp_path / "gone.csv").write_text("path\nnot_there.mp4\n")
    with pytest.raises(ClipSourceError, match="not_there.mp4"):
        clips_from_csv(tmp_path / "gone.csv")


def test_fakevideo_items_are_normalized_clips(tmp_path):
    dataset = FakeVideo(SPEC, num_frames=4, frame_stride=2, crop_px=32, cache_dir=tmp_path)
    assert len(dataset) == SPEC.num_clips
    clip = dataset[1]
    assert clip.shape == (3, 4, 32, 32) and clip.dtype == torch.float32
    # ImageNet normalization of colours in [30, 225]: values within a few units of zero.
    assert clip.abs().max() < 3.0 and clip.std() > 0.05
    labelled = VideoClipDataset(dataset.paths, 4, 2, 32, labels=["a", "b"])
    assert labelled[0][1] == "a"


@settings(max_examples=60, deadline=None)
@given(
    clip_frames=st.integers(1, 200),
    num_frames=st.integers(1, 32),
    stride=st.integers(1, 8),
    mode=st.sampled_from(["pad", "wrap"]),
    seed=st.integers(0, 1000),
)
def test_frame_indices_stay_in_the_clip(clip_frames, num_frames, stride, mode, seed):
    idx = sample_frame_indices(clip_frames, num_frames, stride, np.random.default_rng(seed), mode)
    assert idx.shape == (num_frames,)
    assert idx.min() >= 0 and idx.max() < clip_frames
    if (num_frames - 1) * stride < clip_frames:
        assert (np.diff(idx) == stride).all()


@settings(max_examples=60, deadline=None)
@given(
    height=st.integers(8, 400),
    width=st.integers(8, 400),
    seed=st.integers(0, 1000),
)
def test_crop_boxes_stay_in_the_frame(height, width, seed):
    top, left, h, w = random_resized_crop_box(
        height, width, (0.3, 1.0), (0.75, 1.35), np.random.default_rng(seed)
    )
    assert top >= 0 and left >= 0 and h >= 1 and w >= 1
    assert top + h <= height and left + w <= width
