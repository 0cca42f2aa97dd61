"""A video run's deployment cost taken from another run (`video_deploy.reusable_deployment`):
taken only where that run measured the same deployment on the same GPU, refused with the
reason otherwise; the run's scores then use the figures that run costed."""

from __future__ import annotations

import json

import pytest

from jouleprof.bench.video_deploy import reusable_deployment

RUN = {
    "model": "videomae-b",
    "method": "lora",
    "precision": "bf16",
    "tiny": False,
    "deploy_batch": 1,
    "deploy_passes": 30,
    "deploy_sustained_s": 5.0,
    "lr": 1e-3,
    "seed": 17,
    "epochs": 4,
    "checkpointing": False,
}
CLIP = {"frames": 8, "size": 112}
HARDWARE = {
    "gpus": [{"device": "gpu0", "name": "NVIDIA H200", "power_limit_w": 700.0}],
    "driver_version": "580.159.04",
    "cpu": {"model": "another CPU"},
}


def _dep(**extra):
    return {
        "batch": 1,
        "clip": dict(CLIP),
        "latency_s_mean": 0.006,
        "latency_s_lo": 0.006,
        "latency_s_hi": 0.0075,
        "sustained": {"t0_s": 8.9, "t1_s": 13.9, "time_s": 5.0, "passes": 668},
        "peak_mem_allocated_bytes": 424784384,
        "params": {"total": 86245644, "trainable": 294912},
        "macs_per_clip": 1.76e10,
        "energy": {"value": 719.9, "unit": "J", "source": "measured", "lo": 715.4, "hi": 743.1},
        "energy_per_clip": {
            "value": 1.078,
            "unit": "J",
            "source": "measured",
            "lo": 1.071,
            "hi": 1.112,
        },
        "power": {"value": 143.06, "unit": "W", "source": "measured", "lo": 142.2, "hi": 147.7},
        **extra,
    }


def _source(
    tmp_path, name="src", status="complete", run=None, dep=None, hardware=None, disturbed=False
):
    d = tmp_path / name
    d.mkdir()
    rec = {
        "run_id": f"id-{name}",
        "status": status,
        "config": {
            "video_run": {**RUN, "lr": 3e-3, "seed": 18, "checkpointing": True, **(run or {})}
        },
        "hardware": {**HARDWARE, "cpu": {"model": "a CPU"}, **(hardware or {})},
        "extra": {"video": {"deployment": _dep() if dep is None else dep}, "disturbed": disturbed},
    }
    (d / "run.json").write_text(json.dumps(rec))
    return d


def test_same_deployment_is_taken_whatever_the_training(tmp_path):
    src = _source(tmp_path)
    dep, why = reusable_deployment(src, RUN, CLIP, HARDWARE)
    assert dep is not None and "measured by" in why
    assert dep["energy_per_clip"]["value"] == 1.078
    assert dep["reused_from"]["run_dir"] == str(src) and dep["reused_from"]["run_id"] == "id-src"
    # A study names the source relative to the cell ("cell/../other"): the cell need not exist.
    dep2, _ = reusable_deployment(f"{tmp_path}/not-made-yet/../src", RUN, CLIP, HARDWARE)
    assert dep2 == dep
    # A run that itself took its cost hands on where it was measured, not itself.
    (tmp_path / "second").mkdir()
    rec = json.loads((src / "run.json").read_text())
    rec["extra"]["video"]["deployment"] = dep
    (tmp_path / "second" / "run.json").write_text(json.dumps(rec))
    dep3, why3 = reusable_deployment(tmp_path / "second", RUN, CLIP, HARDWARE)
    assert dep3["reused_from"]["run_dir"] == str(src) and str(src) in why3


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ({"status": "incomplete"}, "not a complete run"),
        ({"run": {"precision": "fp16"}}, "other settings (precision)"),
        (
            {"run": {"method": "full", "deploy_sustained_s": 10.0}},
            "other settings (method, deploy_sustained_s)",
        ),
        ({"dep": _dep(clip={"frames": 16, "size": 224})}, "other settings (clip)"),
        ({"dep": {}}, "measured no deployment cost"),
        (
            {"dep": _dep(energy_per_clip={"value": None, "reason": "no GPU"})},
            "no deployment energy",
        ),
        ({"hardware": {"driver_version": "570.1"}}, "other hardware (driver_version)"),
        (
            {"hardware": {"gpus": [{"device": "gpu0", "name": "NVIDIA A100"}]}},
            "other hardware (gpus)",
        ),
        ({"disturbed": True}, "disturbed"),
    ],
)
def test_another_deployment_is_refused_with_the_reason(tmp_path, source, reason):
    src = _source(tmp_path, **source)
    dep, why = reusable_deployment(src, RUN, CLIP, HARDWARE)
    assert dep is None and reason in why and str(src) in why


def test_missing_or_unreadable_source_is_refused(tmp_path):
    dep, why = reusable_deployment(tmp_path / "nowhere", RUN, CLIP, HARDWARE)
    assert dep is None and "no readable run.json" in why
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "run.json").write_text("{")
    assert reusable_deployment(tmp_path / "bad", RUN, CLIP, HARDWARE)[0] is None


def test_study_cells_name_the_first_cell_of_their_configuration():
    from jouleprof.bench.video_study import (
        VideoStudyConfig,
        ablation_cells,
        confirm_cells,
        lr_cells,
    )

    cfg = VideoStudyConfig(
        models=("videomae-b", "hiera-b"),
        methods=("full", "lora"),
        precisions=("fp16", "bf16"),
        lrs={"full": (1e-5, 1e-4), "lora": (1e-4, 1e-3)},
    )
    sources: dict = {}
    a = lr_cells(cfg, sources)
    b, _ = ablation_cells(cfg, {("videomae-b", "lora"): 1e-3, ("hiera-b", "full"): 1e-5}, sources)
    winner = {"method": "lora", "precision": "bf16", "checkpointing": True, "lr": 1e-3}
    c = confirm_cells(cfg, {"videomae-b": winner}, sources)

    def source(cell):
        argv = list(cell.argv)
        return argv[argv.index("--deploy-from") + 1] if "--deploy-from" in argv else None

    by_id = {x.cell_id: source(x) for x in a + b + c}
    # The first learning rate of each model × method measures; the second takes its cost.
    assert by_id["lr-videomae-b-lora-1e-04"] is None
    assert by_id["lr-videomae-b-lora-1e-03"] == "{cell_dir}/../lr-videomae-b-lora-1e-04"
    # Another precision is another deployment; checkpointing is not.
    assert by_id["abl-videomae-b-lora-fp16-ck0"] is None
    assert by_id["abl-videomae-b-lora-bf16-ck1"] == "{cell_dir}/../lr-videomae-b-lora-1e-04"
    assert by_id["confirm-videomae-b-lora-bf16-ck1-s17"] == "{cell_dir}/../lr-videomae-b-lora-1e-04"
    measured = sorted(k for k, v in by_id.items() if v is None)
    assert len(measured) == len(sources) == 6  # 2 models × 2 methods at bf16, + 2 at fp16
    # Off: every cell measures its own; the study's spec stays as before the setting.
    off = VideoStudyConfig(models=("videomae-b",), methods=("lora",), reuse_deployment=False)
    assert all(source(x) is None for x in lr_cells(off, {}))
    assert "reuse_deployment" not in off.to_json()
    assert VideoStudyConfig().to_json()["reuse_deployment"] is True


def test_scores_of_a_reused_deployment_use_the_figures_it_carries(tmp_path):
    """finish_video_run does not recost a reused window on this run's clock (none of its
    samples lie there)."""
    from jouleprof.bench.video_results import finish_video_run
    from jouleprof.store.rundir import RunDir
    from jouleprof.types import RunRecord, RunStatus

    d = tmp_path / "run"
    reused = _dep(reused_from={"run_dir": "elsewhere", "run_id": "x", "why": "test"})
    rec = RunRecord(run_id="r", kind="video-run", status=RunStatus.COMPLETE)
    rec.extra["video"] = {
        "epochs": [
            {
                "train": {
                    "epoch": 0,
                    "steps": 2,
                    "clips": 8,
                    "t0_s": 0.0,
                    "t1_s": 1.0,
                    "time_s": 1.0,
                    "loss": 1.0,
                    "peak_mem_allocated_bytes": 2**30,
                },
                "val": {
                    "clips": 100,
                    "correct": 50,
                    "top1_pct": 50.0,
                    "loss": 1.0,
                    "t0_s": 1.0,
                    "t1_s": 1.5,
                    "time_s": 0.5,
                    "peak_mem_allocated_bytes": 2**29,
                },
            }
        ],
        "deployment": reused,
    }
    RunDir.create(d, rec)
    video = finish_video_run(d)
    assert video["deployment"]["energy_per_clip"]["value"] == 1.078
    ns_e = video["scores"]["deploy"]["ns_e"]
    assert ns_e["value"] is not None
    again = finish_video_run(d)  # rerunnable: the same figures
    assert again["scores"]["deploy"] == video["scores"]["deploy"]
