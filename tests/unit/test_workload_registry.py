"""The workload registry: lookup, lazy registration, the old import path, and a registry-driven
smoke test of every built-in workload's config and (video) one training step."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from jouleprof.workloads import registry


def test_builtin_workloads_are_registered_by_name():
    assert {"vjepa2", "video"} <= set(registry.names())
    assert registry.names() == sorted(registry.names())


def test_unknown_workload_lists_the_registered_ones():
    with pytest.raises(ValueError) as e:
        registry.get("nope")
    for name in registry.names():
        assert name in str(e.value)


def test_lazy_and_callable_registrations(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    class Mine:
        name = "mine"

    registry.register("mine", Mine)
    assert isinstance(registry.get("mine"), Mine)
    registry.register("lazy", "jouleprof.workloads.video.workload:VideoWorkload")
    assert registry.get("lazy").name == "video"
    with pytest.raises(ValueError, match="module:attr"):
        registry.register("bad", "no_colon_here")
    with pytest.raises(ValueError, match="non-empty"):
        registry.register("", Mine)


def test_the_old_import_path_re_exports_the_same_registry(monkeypatch):
    from jouleprof.bench import workloads
    from jouleprof.workloads.vjepa2.workload import VJepa2Workload

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    assert workloads.VJepa2Workload is VJepa2Workload
    assert workloads.Session is registry.Session and workloads.Workload is registry.Workload
    workloads.register("via-old-path", VJepa2Workload)
    # register writes into the registry module's table (the monkeypatched one)
    assert "via-old-path" in registry._REGISTRY or "via-old-path" in workloads._REGISTRY


TINY_PRESETS = {"vjepa2": "tiny", "video": "hiera-b:tiny"}


@pytest.mark.parametrize("name", sorted(TINY_PRESETS))
def test_every_builtin_workload_builds_a_config_and_describes_it(name):
    pytest.importorskip("torch")
    wl = registry.get(name)
    assert wl.name == name
    cfg = wl.config(TINY_PRESETS[name], 2, 0, {})
    d = wl.describe(cfg)
    assert isinstance(d, dict) and d
    assert cfg.batch_size == 2
    with pytest.raises(ValueError):
        wl.config("no-such-preset", None, None, {})


class _Marks:
    def __init__(self):
        self.phases = []

    @contextmanager
    def step(self):
        yield

    @contextmanager
    def phase(self, name):
        self.phases.append(name)
        yield


def test_video_workload_session_marks_data_forward_backward_optimizer():
    pytest.importorskip("torch")
    wl = registry.get("video")
    cfg = wl.config("swin3d-b:tiny", 2, None, {"method": "lora", "precision": "fp32"})
    marks = _Marks()
    s = wl.session(cfg, marks, "fake")
    try:
        assert s.step(sync=True) > 0
        s.step(sync=False, fixed=True)
        assert marks.phases == ["data", "forward", "backward", "optimizer"] * 2
        facts = s.facts()
        assert (
            facts["method"] == "lora"
            and 0 < facts["parameters"]["trainable"] < facts["parameters"]["total"]
        )
        assert facts["init"]["source"] == "random"
        flops = facts["flops_per_sample"]
        assert flops["forward_backward_flops"] > flops["forward_flops"] > 0
        assert set(s.replays()) >= {"forward", "forward+backward", "optimizer"}
        assert s.samples_per_step == 2
    finally:
        s.close()


def test_video_workload_refuses_bad_fields_and_pairs():
    pytest.importorskip("torch")
    wl = registry.get("video")
    with pytest.raises(ValueError, match="choose from"):
        wl.config("hiera-b", None, None, {"nonsense": 1})
    with pytest.raises(ValueError, match="not supported"):
        wl.config("hiera-b", None, None, {"method": "full", "precision": "int8"})
    with pytest.raises(ValueError, match="video workload"):
        wl.config("hiera-b", None, None, {"compile": True})
    with pytest.raises(ValueError, match="'fake'"):
        wl.session(wl.config("hiera-b:tiny", 1, None, {}), _Marks(), "/some/dataset")


@pytest.mark.parametrize("name", registry.names())
def test_every_registered_workload_runs_a_cell_end_to_end(name, tmp_path):
    """One e2e cell of each registered workload's tiny preset on the CPU, through the same
    cell machinery as `jouleprof profile`: it completes and its figures are written (the
    BERT workload's FLOPs facts once broke the cell's figures)."""
    pytest.importorskip("torch")
    from jouleprof.bench.train import CellConfig, run_cell
    from jouleprof.bench.warmup import WarmupRule
    from jouleprof.store.rundir import RunDir

    preset = TINY_PRESETS.get(name, "tiny")
    overrides = {"num_workers": 0} if name == "vjepa2" else {}
    cfg = CellConfig(workload=name, preset=preset, batch_size=2, mode="e2e", steps=2,
                     duration_s=None, num_workers=0, overrides=overrides,
                     warmup=WarmupRule(min_steps=1, max_steps=2))  # fmt: skip
    run_cell(cfg, tmp_path / name)
    rec = RunDir(tmp_path / name).read_record()
    assert rec.status.value == "complete", rec.notes
    flops = rec.extra["workload_facts"].get("flops_per_sample")
    if isinstance(flops, dict) and flops.get("forward_backward_flops"):
        assert flops["forward_backward_flops"] > 0
    else:  # a workload that cannot count says why
        assert flops is None or flops.get("reason")


def test_vjepa2_loader_workers_are_capped_at_the_cores_unless_asked_for(monkeypatch):
    import jouleprof.cores
    from jouleprof.workloads.vjepa2.workload import VJepa2Workload

    monkeypatch.setattr(jouleprof.cores, "pool_cores", lambda: 2)
    w = VJepa2Workload()
    assert w.config("vit_huge", None, None, {}).num_workers == 2  # the preset's 4, capped
    assert w.config("vit_huge", None, 3, {}).num_workers == 3  # asked for: kept
    assert w.config("vit_huge", None, None, {"num_workers": 4}).num_workers == 4  # --set
    assert w.config("tiny", None, None, {}).num_workers == 0
