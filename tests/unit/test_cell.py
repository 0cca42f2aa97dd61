"""A training cell end to end on the CPU (tiny V-JEPA2), and its out-of-memory path."""

import json

import pytest

torch = pytest.importorskip("torch")

from jouleprof.bench import workloads  # noqa: E402
from jouleprof.bench.train import CellConfig, run_cell  # noqa: E402
from jouleprof.bench.workloads import VJepa2Workload  # noqa: E402
from jouleprof.store.rundir import RunDir  # noqa: E402


def _tiny(**kw) -> CellConfig:
    """A tiny V-JEPA2 cell on the CPU, no loader workers (each test names what differs)."""
    kw.setdefault("preset", "tiny")
    kw.setdefault("overrides", {"num_workers": 0})
    return CellConfig(**kw)


def test_fine_cell_records_phases_overhead_and_says_why_energy_is_missing(tmp_path):
    out = tmp_path / "cell"
    cfg = CellConfig(
        preset="tiny",
        mode="fine",
        steps=6,
        overhead_pairs=2,
        overhead_block_steps=2,
        gpus=None,
        overrides={"num_workers": 0},
    )
    run_cell(cfg, out)
    rd = RunDir(out)
    rec = rd.read_record()
    assert rec.status.value == "complete"
    spans = rd.read_spans()
    assert set(spans["phase"]) >= {
        "data",
        "forward",
        "forward/target",
        "forward/context",
        "backward",
        "optimizer",
        "ema",
    }
    assert spans["step"].nunique() == 6  # the measured segment only; warm-up is not recorded
    steps = (out / "steps.csv").read_text().splitlines()
    assert steps[0].startswith("step,segment")
    assert {"warmup", "measured", "overhead"} <= {line.split(",")[1] for line in steps[1:]}
    s = rec.summary
    assert s["throughput_samples_per_s"].value > 0
    assert s["fine_overhead_pct"].source.value == "measured"
    assert s["recorder_host_pct"].source.value == "estimated"
    assert s["fine_overhead_median_pct"].source.value == "measured"
    assert s["data_wait_pct"].source.value == "measured"  # every mode: the trainer's own clock
    assert 0 <= s["data_wait_pct"].value < 100
    assert rec.extra["measured_segment"]["data_wait_s"] >= 0
    assert 0 < s["recorder_host_pct"].value < 100
    flops = rec.extra["workload_facts"]["flops_per_sample"]["forward_backward_flops"]
    assert flops > 0 and s["floor_energy_per_sample_j"].value == pytest.approx(
        flops / (790e12 / 700)
    )
    if not any(d.startswith("gpu") for d in rd.read_samples()["device"]):
        assert s["energy_per_sample_j"].value is None and s["energy_per_sample_j"].reason
        assert rec.extra["attribution"]["regression"]["ok"] is False
    # Where the wall time went: every part named, in the order the cell spent it.
    timing = rec.extra["timing_s"]
    parts = ["process_start", "open", "setup", "facts", "warmup", "measured", "overhead"]
    assert list(timing)[: len(parts)] == parts
    assert {"teardown", "close", "finish"} <= set(timing)
    assert all(v is None or v >= 0 for v in timing.values())
    assert set(rec.extra["setup_timing_s"]) == {"loader_start", "cuda_init", "model_build"}
    first = rec.extra["warmup_first_step"]
    assert 0 <= first["data_wait_s"] <= first["s"]


class _OomWorkload(VJepa2Workload):
    name = "oomtest"

    def session(self, config, marker, data):
        s = super().session(config, marker, data)
        if config.batch_size >= 4:

            def boom(sync, fixed=False):
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")

            s.step = boom
        return s


def test_out_of_memory_is_recorded_and_data_kept(tmp_path):
    workloads.register("oomtest", _OomWorkload)
    out = tmp_path / "oom"
    run_cell(_tiny(workload="oomtest", batch_size=4, mode="e2e", steps=2), out)
    rec = RunDir(out).read_record()
    assert rec.extra["oom"] is True
    assert rec.status.value == "failed"
    assert any("out of memory" in n for n in rec.notes)
    assert (
        json.loads((out / "run.json").read_text())["summary"]["throughput_samples_per_s"]["reason"]
        == "out of memory"
    )


def test_bad_cell_config_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="unknown mode"):
        CellConfig(mode="turbo")
    with pytest.raises(ValueError, match="overhead_pairs"):
        CellConfig(overhead_pairs=1)
    with pytest.raises(ValueError, match="unknown workload"):
        run_cell(CellConfig(workload="nope"), tmp_path / "x")
    with pytest.raises(ValueError, match="preset"):
        run_cell(CellConfig(preset="vit_gigantic"), tmp_path / "y")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


class _OwnGpuWorkload(VJepa2Workload):
    name = "owngpu"

    def gpus(self):
        return (3,)


def test_a_cell_measures_its_workloads_gpu_unless_told_otherwise(tmp_path):
    # With no NVIDIA driver, the error names the GPUs the cell asked the sensors for.
    from jouleprof.errors import SensorUnavailable

    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("an NVIDIA driver is present: this test reads the no-driver error")

    workloads.register("owngpu", _OwnGpuWorkload)
    base = dict(workload="owngpu", preset="tiny", mode="e2e", steps=1)
    with pytest.raises(SensorUnavailable, match=r"GPU\(s\) \[3\] were requested"):
        run_cell(CellConfig(**base, overrides={"num_workers": 0}), tmp_path / "own")
    with pytest.raises(SensorUnavailable, match=r"GPU\(s\) \[1\] were requested"):
        run_cell(CellConfig(**base, gpus=(1,), overrides={"num_workers": 0}), tmp_path / "told")


def test_segment_edges_densify_the_counter_only_where_a_sampler_reads_devices():
    from types import SimpleNamespace

    from jouleprof.bench import train

    calls = []

    def sampler(devices):
        return SimpleNamespace(devices=devices, densify=lambda *a, **k: calls.append((a, k)))

    train._dense_edge(SimpleNamespace(sampler=sampler(["gpu0"])))
    train._dense_edge(SimpleNamespace(sampler=sampler([])))  # baseline: nothing sampled
    # A counter reading right at the edge, then a second of them about every refresh.
    assert calls == [((train.EDGE_DENSE_S,), {"read_now": True})]


class _RecompilingWorkload(VJepa2Workload):
    """A session that says it compiles: one graph per new batch, the last in the measured part."""

    name = "recompiles"

    def session(self, config, marker, data):
        s = super().session(config, marker, data)
        s.warmup_on_real_batches = True
        seen = {"graphs": 0, "fixed_steps": 0, "steps": 0}
        step = s.step

        def counting_step(sync, fixed=False):
            seen["steps"] += 1
            seen["fixed_steps"] += bool(fixed)
            if not fixed:
                seen["graphs"] += 1  # "a new shape"
            return step(sync, fixed)

        s.step = counting_step
        s.compiled_graphs = lambda: seen["graphs"]
        s.seen = seen
        _RecompilingWorkload.last = s
        return s


def test_a_compiled_session_warms_up_on_real_batches_and_recompiles_are_said(tmp_path):
    workloads.register("recompiles", _RecompilingWorkload)
    out = tmp_path / "rc"
    run_cell(_tiny(workload="recompiles", mode="e2e", steps=2), out)
    rec = RunDir(out).read_record()
    seen = _RecompilingWorkload.last.seen
    assert seen["fixed_steps"] == 0  # no replayed batch in warm-up or measured part
    warm = rec.extra["warmup_steps"]
    assert rec.extra["compiled_graphs"] == {"warmup": warm, "measured": 2}
    assert any("compiled 2 graph(s) during the measured segment" in n for n in rec.notes)


def test_an_uncompiled_session_records_no_compile_figures(tmp_path):
    out = tmp_path / "plain"
    run_cell(_tiny(mode="e2e", steps=1), out)
    rec = RunDir(out).read_record()
    assert "compiled_graphs" not in rec.extra
    assert not any("torch.compile" in n for n in rec.notes)


def test_the_warmup_note_says_which_batches_it_trained_on(tmp_path):
    workloads.register("recompiles", _RecompilingWorkload)
    run_cell(_tiny(workload="recompiles", mode="e2e", steps=1), tmp_path / "a")
    run_cell(_tiny(mode="e2e", steps=1), tmp_path / "b")
    notes_a = " ".join(RunDir(tmp_path / "a").read_record().notes)
    notes_b = " ".join(RunDir(tmp_path / "b").read_record().notes)
    assert "trains on real batches" in notes_a and "replay that batch" not in notes_a
    assert "replay that batch" in notes_b and "real batches" not in notes_b


def test_a_cross_check_tools_setup_is_not_timed_as_training(tmp_path, monkeypatch):
    # ZeusMonitor took 2.2 s to open on the H200 and the segment's timer counted it as
    # training: a third of the cell's throughput went missing. The tool opens first now.
    import contextlib
    import time as _time

    from jouleprof.bench import modes

    opened: dict[str, float] = {}

    @contextlib.contextmanager
    def slow_tool(mode, out_dir, gpu_indices=None):
        _time.sleep(0.6)  # the tool's own set-up
        opened["at"] = _time.perf_counter()
        result = modes.CrossCheck("zeus")
        yield result
        result.gpu_energy_j = 12.0

    monkeypatch.setattr(modes, "require", lambda m: modes.Mode.parse(m))
    monkeypatch.setattr(modes, "crosscheck", slow_tool)
    out = tmp_path / "zeus"
    run_cell(_tiny(mode="zeus", steps=2), out)
    rec = RunDir(out).read_record()
    seg = rec.extra["measured_segment"]
    steps_s = sum(
        float(line.split(",")[3])
        for line in (out / "steps.csv").read_text().splitlines()[1:]
        if line.split(",")[1] == "measured"
    )
    measured_s = seg["t1_s"] - seg["t0_s"]
    assert measured_s < steps_s + 0.3  # the 0.6 s set-up lies outside the segment
    per_sample_j = rec.summary["crosscheck_energy_per_sample_j"].value
    assert per_sample_j == pytest.approx(12.0 / seg["samples"])


def test_the_counter_is_read_densely_before_the_segment_ends_too():
    from jouleprof.bench.train import END_LEAD_S, _end_is_near

    # A 6 s segment of 0.2 s steps: dense from about END_LEAD_S + a step before its end.
    assert not _end_is_near(10, 2.0, None, 6.0)
    assert not _end_is_near(26, 5.2, None, 6.0)
    assert _end_is_near(27, 5.4, None, 6.0)
    # Steps longer than the lead (1 s at batch 64): the last step starts dense.
    assert not _end_is_near(4, 4.0, None, 6.0)
    assert _end_is_near(5, 5.0, None, 6.0)
    # A segment of a fixed number of steps.
    assert not _end_is_near(5, 1.0, 10, 0.0)
    assert _end_is_near(8, 1.6, 10, 0.0) and _end_is_near(9, 1.8, 10, 0.0)
    assert not _end_is_near(0, 0.0, 10, 6.0)
    assert END_LEAD_S > 0.1  # more than a refresh: a counter read must land in it


def test_the_dense_reads_are_renewed_while_a_segment_runs_past_its_prediction():
    from jouleprof.bench.train import END_LEAD_S, _dense_lead_s

    # 0.2 s steps, a 6 s segment: dense from step 27 (5.4 s) for END_LEAD_S + two steps.
    assert _dense_lead_s(26, 5.2, None, 6.0, None) is None
    lead = _dense_lead_s(27, 5.4, None, 6.0, None)
    assert lead == pytest.approx(END_LEAD_S + 0.4)
    until = 5.4 + lead
    # the next steps fall inside that stretch: nothing new asked
    assert _dense_lead_s(28, 5.6, None, 6.0, until) is None
    # a loaded machine stretches the last step to 1 s: past the stretch's last half of
    # END_LEAD_S the reads are renewed, so the segment's end still has reads before it
    assert _dense_lead_s(29, 5.6 + 1.0, None, 6.0, until) is not None


def test_an_e2e_cell_reads_the_counter_in_the_segments_last_half_second(tmp_path, monkeypatch):
    from dataclasses import replace

    import pandas as pd

    from jouleprof.bench.modes import Mode

    plain = Mode.measure_config

    def with_simulated_gpu(self, gpus=None, interval_s=0.02):
        return replace(plain(self, gpus, interval_s), simulate_gpu_w=300.0)

    monkeypatch.setattr(Mode, "measure_config", with_simulated_gpu)
    out = tmp_path / "e2e"
    run_cell(_tiny(mode="e2e", duration_s=3.0, gpus=None), out)
    seg = RunDir(out).read_record().extra["measured_segment"]
    samples = pd.read_csv(out / "samples.csv")
    counter_t = samples.loc[samples["energy_j"].notna(), "t_s"]
    # e2e reads the counter about once a second; in the segment's last 0.6 s it reads it at
    # every refresh (100 ms), so that the end lies within a refresh of a read on either side.
    before_end = counter_t[(counter_t < seg["t1_s"]) & (counter_t > seg["t1_s"] - 0.6)]
    assert len(before_end) >= 3


def test_fine_cell_with_isolation_records_every_replay_including_the_step_without_ema(tmp_path):
    out = tmp_path / "cell"
    run_cell(_tiny(mode="fine", steps=2, gpus=None, isolation_s=0.05, isolation_repeats=2), out)
    rows = (out / "isolation_windows.csv").read_text().splitlines()
    assert rows[0].startswith("replay,n_calls,t0_s,t1_s")
    replays = [line.split(",")[0] for line in rows[1:]]
    # The in-place optimizer's loop runs last, after the loops the main system uses; with
    # two rounds, the second round follows the first.
    one_round = ["forward", "forward+backward", "optimizer", "ema", "forward+backward+optimizer"]
    assert replays == one_round * 2
    assert all(int(line.split(",")[1]) >= 3 for line in rows[1:])  # min_calls
    rec = RunDir(out).read_record()
    assert rec.status.value == "complete"
    assert [w[0] for w in rec.extra["isolation_windows"]] == replays
