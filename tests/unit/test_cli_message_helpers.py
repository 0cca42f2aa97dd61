"""CLI wording: counts in their number, config field names said as the flags the user typed,
and `run video`'s no-CUDA note and Ctrl-C line (as `infer` and `profile` say them)."""

from __future__ import annotations

import json
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from jouleprof.cli.console import cli_flags, counted, flags_named


def test_counted_says_one_in_the_singular():
    assert counted(1, "figure") == "1 figure"
    assert counted(0, "figure") == "0 figures"
    assert counted(3, "more figure") == "3 more figures"
    assert counted(1, "run") == "1 run" and counted(2, "run") == "2 runs"
    assert counted(2, "entry", "entries") == "2 entries"


def _cmd(
    batch_size: Annotated[int, typer.Option(help="b")] = 1,
    duration_s: Annotated[float, typer.Option(help="d")] = 1.0,
    steps: Annotated[int, typer.Option(help="s")] = 1,
    mode: Annotated[str, typer.Option(help="m")] = "fine",
    power_buffer: Annotated[bool, typer.Option("--power-buffer/--no-power-buffer")] = False,
    set_: Annotated[list[str] | None, typer.Option("--set", help="k=v")] = None,
) -> None:
    pass


def test_cli_flags_reads_each_options_flag():
    assert cli_flags(_cmd) == {
        "batch_size": "--batch-size",
        "duration_s": "--duration-s",
        "steps": "--steps",
        "mode": "--mode",
        "power_buffer": "--power-buffer",
        "set_": "--set",
    }


@pytest.mark.parametrize(
    ("message", "said"),
    [
        ("give duration_s > 0 or steps ≥ 1", "give --duration-s > 0 or --steps ≥ 1"),
        ("batch_size must be ≥ 1, got 0", "--batch-size must be ≥ 1, got 0"),
        ("excite need mode 'fine'", "excite need --mode 'fine'"),
        # prose, file names and quoted field lists stay as they are
        ("trained 3 steps in fine mode", "trained 3 steps in fine mode"),
        ("wrote power_buffer.csv", "wrote power_buffer.csv"),
        ("valid fields: ['batch_size', 'dtype']", "valid fields: ['batch_size', 'dtype']"),
        ("not --batch-size nor overhead_batch_size", "not --batch-size nor overhead_batch_size"),
    ],
)
def test_flags_named_says_the_flags(message, said):
    assert flags_named(message, _cmd) == said


def test_flags_named_keeps_fields_set_by_name():
    assert flags_named("batch_size must be ≥ 1", _cmd, skip={"batch_size"}) == (
        "batch_size must be ≥ 1"
    )


@pytest.fixture
def no_cuda(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def _video(tmp_path, *extra):
    from jouleprof.cli.main import app

    args = ["run", "video", "--model", "videomae-b", "--out", str(tmp_path / "v"), *extra]
    return CliRunner().invoke(app, args)


def test_run_video_on_cpu_notes_it_and_says_what_an_interrupt_kept(tmp_path, monkeypatch, no_cuda):
    import jouleprof.bench.video_run as vr

    def interrupted(cfg, out, on_progress=None):
        out.mkdir(parents=True, exist_ok=True)
        (out / "run.json").write_text(json.dumps({"status": "incomplete"}))
        raise KeyboardInterrupt

    monkeypatch.setattr(vr, "run_video", interrupted)
    r = _video(tmp_path)
    assert r.exit_code == 130, r.output
    out = " ".join(r.output.split())  # rich may wrap the long note
    assert "no CUDA device: fine-tuning runs on the CPU" in out
    assert "(--tiny --max-steps-per-epoch 2 for a smoke test)" in out
    assert f"interrupted: {tmp_path / 'v'} holds everything recorded until then" in out
    # --tiny already is the smoke test: the note drops its hint
    r = _video(tmp_path, "--tiny")
    assert "no CUDA device" in r.output and "smoke test" not in r.output


def test_run_video_interrupted_before_measuring_says_nothing_was_recorded(
    tmp_path, monkeypatch, no_cuda
):
    import jouleprof.bench.video_run as vr
    from jouleprof.interrupts import Terminated

    def terminated(cfg, out, on_progress=None):
        raise Terminated("SIGTERM")

    monkeypatch.setattr(vr, "run_video", terminated)
    r = _video(tmp_path)
    assert r.exit_code == 143, r.output  # SIGTERM's code, as measure and study exit
    assert "interrupted before the measurement began: nothing was recorded" in r.output


def test_infer_keeps_its_no_cuda_note(tmp_path, monkeypatch, no_cuda):
    import jouleprof.bench.infer as bi
    from jouleprof.cli.main import app

    def interrupted(cfg, path, on_stage=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(bi, "run_infer", interrupted)
    r = CliRunner().invoke(app, ["infer", "--model", "videomae-b", "--out", str(tmp_path / "i")])
    out = " ".join(r.output.split())
    assert r.exit_code == 130, r.output
    assert (
        "no CUDA device: inference runs on the CPU, latency only (no GPU energy); a full-size "
        "video model takes seconds a pass here (--tiny for a smoke test)"
    ) in out
