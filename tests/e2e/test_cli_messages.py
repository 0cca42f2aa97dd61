"""One-line errors of `jouleprof profile` and `jouleprof run video` name the flags the user typed
(--batch-size), not the config fields behind them (batch_size), and list valid values as text,
not as a Python tuple. All commands run in one process (jouleprof_many); each fails before
training."""

from __future__ import annotations

import pytest

from conftest import jouleprof_many

PROFILE = ["profile", "vjepa2", "--preset", "tiny", "--duration-s", "3", "--no-report"]

BAD = [
    # (extra args, expected in the error, not expected anywhere in stderr)
    ((*PROFILE, "--duration-s", "0"), "error: give --duration-s > 0 or --steps ≥ 1", "duration_s"),
    ((*PROFILE, "--batch-size", "0"), "error: --batch-size must be ≥ 1, got 0", "batch_size"),
    ((*PROFILE, "--steps", "0"), "error: --steps must be ≥ 1, got 0", "error: steps"),
    ((*PROFILE, "--isolation-s", "-1"), "error: --isolation-s must be ≥ 0", "isolation_s"),
    (
        (*PROFILE, "--overhead-block-steps", "0"),
        "--overhead-pairs must be 0 (no overhead blocks) or ≥ 2, and --overhead-block-steps ≥ 1",
        "overhead_block_steps",
    ),
    # workload config errors, raised inside the run: the flags too
    ((*PROFILE, "--grad-accum-steps", "0"), "error: --grad-accum-steps must be", "grad_accum"),
    (
        (*PROFILE, "--optimizer-impl", "nope"),
        "error: --optimizer-impl must be one of fused, foreach, default, got 'nope'",
        "('fused'",
    ),
    (
        (*PROFILE, "--preset", "nope"),
        "valid presets: tiny, vit_base, vit_huge, vit_large",
        "('tiny'",
    ),
    # a field set by name keeps its name: the user typed num_workers
    ((*PROFILE, "--set", "num_workers=-1"), "error: num_workers must be >= 0", "--num-workers"),
    (
        ("run", "video", "--model", "videomae-b", "--batch-size", "0"),
        "error: --batch-size must be ≥ 1, got 0",
        "batch_size",
    ),
    (
        ("run", "video", "--model", "videomae-b", "--synthetic-clips", "1,2"),
        "error: --synthetic-clips must be 3 counts ≥ 0 (train,val,test), got 1,2",
        "(1, 2)",
    ),
    # data: values out of range are refused at the flag, before any work (--frames 0 once
    # cached 32 frames, --test-fraction -1 was taken)
    (
        ("data", "manifest", "mod20", "no-such-root", "--test-fraction", "-1"),
        "Invalid value for '--test-fraction'",
        "test_fraction",
    ),
    (("data", "cache", "m.csv", "--frames", "0"), "Invalid value for '--frames'", "num_frames"),
    (("data", "cache", "m.csv", "--workers", "0"), "Invalid value for '--workers'", "Traceback"),
]


@pytest.fixture(scope="module")
def bad_results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad")
    return jouleprof_many([[*a, "--out", tmp / f"r{i}"] for i, (a, _, _) in enumerate(BAD)])


@pytest.mark.parametrize(("i", "message", "absent"), [(i, m, x) for i, (_, m, x) in enumerate(BAD)],
                         ids=[" ".join(a[len(PROFILE):] if a[0] == "profile" else a[:2] + a[4:])
                              for a, _, _ in BAD])  # fmt: skip
def test_bad_input_names_the_flag(bad_results, i, message, absent):
    r = bad_results[i]
    assert r.returncode == 2, r.stderr
    assert message in r.stderr, r.stderr
    assert absent not in r.stderr, r.stderr
    assert "Traceback" not in r.stderr + r.stdout


def test_predict_train_and_a_reused_run_directory_name_what_the_user_gave(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text("{}")
    bad_batch, reused = jouleprof_many([
        ["predict", "train", "--batch", "0"],
        ["measure", "--out", str(tmp_path / "run"), "--", "true"],
    ])  # fmt: skip
    assert bad_batch.returncode == 2 and "error: --batch must be" in bad_batch.stderr
    assert "already holds a run" in reused.stderr and "--out" in reused.stderr
    assert "Traceback" not in bad_batch.stderr + reused.stderr
