"""The phase recorder on a real GPU: event timing, overhead, and the run's clock."""

from __future__ import annotations

import json
import os
import statistics

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)

from jouleprof.bench.overhead import interleaved_overhead  # noqa: E402
from jouleprof.clock import MonotonicClock  # noqa: E402
from jouleprof.timeline.markers import NullRecorder  # noqa: E402
from jouleprof.timeline.recorder import PhaseRecorder  # noqa: E402

N = 8192  # bf16 8192³: about 1.4 ms per matmul on an H200
REPORT: dict[str, object] = {}


def _report(key: str, value: object) -> None:
    """Figures worth keeping; written to $JOULEPROF_GPU_REPORT/recorder_gpu.json if set."""
    REPORT[key] = value
    out = os.environ.get("JOULEPROF_GPU_REPORT")
    if out:
        with open(os.path.join(out, "recorder_gpu.json"), "w") as f:
            json.dump(REPORT, f, indent=2)
    print(key, value)


@pytest.fixture(scope="module")
def mats():
    torch.cuda.init()
    a = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    for _ in range(20):  # warm up clocks and cuBLAS
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    return a, b, c


def _step(rec, mats, work=(("forward", 4), ("backward", 8), ("optimizer", 2))):
    a, b, c = mats
    with rec.step():
        for name, n in work:
            with rec.phase(name):
                for _ in range(n):
                    torch.matmul(a, b, out=c)


def _durations(spans):
    out: dict[str, list[float]] = {}
    for s in spans:
        out.setdefault(s.phase, []).append(s.duration_s)
    return {k: statistics.median(v) for k, v in out.items()}


LONG = (("forward", 8), ("backward", 16), ("optimizer", 6))


def test_event_durations_match_synchronized_timing(mats):
    clock = MonotonicClock()
    ev = PhaseRecorder(clock)
    sy = PhaseRecorder(clock, sync=True)
    assert (ev.mode, sy.mode) == ("cuda-events", "cuda-sync")
    # Interleaved step by step: run one after the other, the two timings also held the
    # clocks' drift between them (after the suite's earlier loads, the H200 ran the second
    # set 2.5–3 % slower in every phase, gpu_tests_81638bf.txt, a share of each phase that
    # the constant-latency check below then refused).
    for i in range(40):
        _step(ev if i % 2 == 0 else sy, mats, LONG)
    ev.close()
    sy.close()
    d_ev, d_sy = _durations(ev.sink.spans), _durations(sy.sink.spans)
    _report("median_phase_s_events", d_ev)
    _report("median_phase_s_sync", d_sy)
    # Synchronized timing also holds the sync's and the next launch's latency: a constant per
    # phase, whatever its length (on the H200 host 0.28–0.41 ms, gpu_tests_1f648cf.txt, where
    # a 3 % tolerance failed the 9.5 ms phase). Events must not lose time (sync − events
    # within [−0.2, +1] ms) and the gap must be one latency, not a share of each phase.
    gap_s = {name: d_sy[name] - d_ev[name] for name in ("forward", "backward", "optimizer")}
    _report("sync_minus_events_s", gap_s)
    for name, gap in gap_s.items():
        assert -2e-4 <= gap <= 1e-3, (name, gap)
    assert max(gap_s.values()) - min(gap_s.values()) < 3e-4, gap_s
    _report("host_us_per_boundary_events", ev.stats.host_us_per_boundary)
    _report("max_host_lead_s", ev.stats.max_host_lead_s)
    assert ev.stats.max_host_lead_s < 1e-4


def test_events_add_under_one_percent(mats):
    clock = MonotonicClock()

    def run_block(instrumented: bool, n_steps: int) -> list[float]:
        rec = PhaseRecorder(clock) if instrumented else NullRecorder()
        torch.cuda.synchronize()
        t0 = clock.now_s()
        for _ in range(n_steps):
            _step(rec, mats)
        torch.cuda.synchronize()
        dt = (clock.now_s() - t0) / n_steps
        if instrumented:
            rec.close()
        return [dt] * n_steps

    result = interleaved_overhead(run_block, blocks=10, steps_per_block=20, drop_first=0)
    _report("overhead_events", result.to_json())
    # Power-capped matmuls vary ±2% from block to block: ask that the overhead is not
    # shown to exceed 1%, and that the point estimate stays small.
    assert result.ci_lo_pct < 1.0 and result.overhead_pct < 2.0

    def run_sync_block(instrumented: bool, n_steps: int) -> list[float]:
        rec = PhaseRecorder(clock, sync=True) if instrumented else NullRecorder()
        torch.cuda.synchronize()
        t0 = clock.now_s()
        for _ in range(n_steps):
            _step(rec, mats)
        torch.cuda.synchronize()
        return [(clock.now_s() - t0) / n_steps] * n_steps

    sync = interleaved_overhead(run_sync_block, blocks=4, steps_per_block=10, drop_first=0)
    _report("overhead_sync_large_matmuls", sync.to_json())


def test_small_kernels_overhead_events_vs_sync():
    """Launch-bound steps (many small kernels): where synchronizing hurts most."""
    clock = MonotonicClock()
    x = torch.randn(256, 256, device="cuda")

    def step(rec):
        with rec.step():
            for name in ("forward", "backward", "optimizer", "ema"):
                with rec.phase(name):
                    for _ in range(40):
                        x.mul_(1.0001)

    def make(kind):
        def run_block(instrumented: bool, n_steps: int) -> list[float]:
            rec = PhaseRecorder(clock, sync=(kind == "sync")) if instrumented else NullRecorder()
            torch.cuda.synchronize()
            t0 = clock.now_s()
            for _ in range(n_steps):
                step(rec)
            torch.cuda.synchronize()
            if instrumented:
                rec.close()
            return [(clock.now_s() - t0) / n_steps] * n_steps

        return run_block

    ev = interleaved_overhead(make("events"), blocks=4, steps_per_block=50, drop_first=0)
    sy = interleaved_overhead(make("sync"), blocks=4, steps_per_block=50, drop_first=0)
    _report("overhead_small_kernels_events", ev.to_json())
    _report("overhead_small_kernels_sync", sy.to_json())
    # Reported, not asserted: when the GPU waits on the host anyway, a synchronize costs
    # little, and each event costs a driver call or two.


def test_spans_lie_on_the_run_clock(mats):
    clock = MonotonicClock()
    rec = PhaseRecorder(clock, anchor_interval_s=0.5)
    torch.cuda.synchronize()
    t_before = clock.now_s()
    while clock.now_s() - t_before < 3.0:
        _step(rec, mats)
    torch.cuda.synchronize()
    t_after = clock.now_s()
    rec.close()
    spans = rec.sink.spans
    first = min(spans, key=lambda s: s.t0_s)
    last = max(spans, key=lambda s: s.t1_s)
    # The GPU was idle when the first phase was enqueued: it starts right away.
    assert -5e-5 <= first.t0_s - first.host_t0_s < 2e-4
    # The last phase ends just before synchronize() returned.
    assert -5e-5 <= t_after - last.t1_s < 5e-4
    assert all(t_before - 5e-5 <= s.t0_s <= s.t1_s <= t_after + 5e-5 for s in spans)
    assert all(s.t0_s >= s.host_t0_s - 5e-5 for s in spans)
    st = rec.stats
    _report(
        "anchors",
        {
            "n": st.n_anchors,
            "rejected": st.n_rejected_anchors,
            "drift_ppm": st.drift_ppm,
            "max_halfwidth_us": max(a.halfwidth_s for a in rec.anchors) * 1e6,
            "max_pending_steps": st.max_pending_steps,
            "n_forced_waits": st.n_forced_waits,
        },
    )
    assert st.n_anchors >= 4
    # Phases of a step run back to back on the GPU.
    by = {(s.step, s.phase): s for s in spans}
    gaps = [by[(k, "backward")].t0_s - by[(k, "forward")].t1_s for k in range(st.n_steps)]
    assert max(abs(g) for g in gaps) < 5e-5


def test_auto_phases_on_cuda_orders_forward_backward_optimizer():
    from jouleprof.integrations.torch_hooks import auto_phases

    model = torch.nn.Sequential(
        torch.nn.Linear(2048, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 2048)
    ).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rec = PhaseRecorder(MonotonicClock())
    x = torch.randn(512, 2048, device="cuda")
    handle = auto_phases(model, opt, rec)
    for _ in range(5):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    handle.remove()
    rec.close()
    assert handle.n_backward_fallbacks == 0
    steps: dict[int, list] = {}
    for s in sorted(rec.sink.spans, key=lambda s: s.t0_s):
        steps.setdefault(s.step, []).append(s)
    assert sorted(steps) == [0, 1, 2, 3, 4]
    for spans in steps.values():
        assert [s.phase for s in spans] == ["forward", "backward", "optimizer"]
        for a, b in zip(spans, spans[1:], strict=False):
            assert a.t1_s <= b.t0_s + 1e-6


def test_recorder_inside_measure_writes_spans_on_the_samples_clock(tmp_path):
    from jouleprof.measurement import measure

    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    with measure(tmp_path / "run", idle_s=0.0) as m:
        rec = PhaseRecorder(m.clock, m.span_writer(), record=m.record)
        for _ in range(50):
            with rec.step():
                with rec.phase("forward"):
                    for _ in range(20):
                        x @ x
                with rec.phase("backward"):
                    for _ in range(40):
                        x @ x
        rec.close()
    samples = m.run_dir.read_samples()
    spans = m.run_dir.read_spans()
    assert len(spans) == 100
    assert samples["t_s"].min() <= spans["t0_s"].min()
    assert spans["t1_s"].max() <= samples["t_s"].max()
    assert m.record.extra["phase_recorder"]["mode"] == "cuda-events"


def test_replayed_phase_runs_twice_on_the_device_with_event_timed_spans(mats):
    """`replay` with a RepeatConfig on CUDA events: a drawn step holds two spans of the copy,
    each timed on the device like the single copies (within 15 %), and run order is kept."""
    from jouleprof.timeline.repeat import RepeatConfig

    src = torch.ones(1 << 26, device="cuda")  # 256 MiB
    dst = torch.empty_like(src)
    rec = PhaseRecorder(MonotonicClock(), repeat=RepeatConfig(fraction=0.5, window_s=60.0))
    assert rec.mode == "cuda-events"
    a, b, c = mats
    for _ in range(40):
        with rec.step():
            rec.replay("copy", dst.copy_, src)
            with rec.phase("gemm"):
                torch.matmul(a, b, out=c)
    rec.close()
    spans = rec.sink.spans
    per_step: dict[int, list] = {}
    for s in spans:
        per_step.setdefault(s.step, []).append(s)
    twice = [v for v in per_step.values() if sum(s.phase == "copy" for s in v) == 2]
    assert 5 < len(twice) < 35
    assert len(twice) == rec.repeater.to_json()["n_repeated_steps"]
    once = [s.duration_s for v in per_step.values() for s in v
            if s.phase == "copy" and v not in twice]  # fmt: skip
    second = [[s for s in v if s.phase == "copy"][1].duration_s for v in twice]
    ratio = statistics.median(second) / statistics.median(once)
    _report("replayed_copy_second_over_single", ratio)
    assert 0.85 < ratio < 1.15, ratio
    for v in twice:
        copies = [s for s in v if s.phase == "copy"]
        assert copies[0].t1_s <= copies[1].t0_s + 1e-6
