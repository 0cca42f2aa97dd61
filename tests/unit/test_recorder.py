"""The phase recorder on CPU: host mode, the clock map, and the CUDA-event path on a fake GPU."""

from __future__ import annotations

import contextlib
import time

import pytest

from jouleprof.clock import ManualClock, MonotonicClock
from jouleprof.store.rundir import RunDir
from jouleprof.timeline import recorder as recmod
from jouleprof.timeline.clockmap import ClockAnchor, ClockMap
from jouleprof.timeline.markers import PhaseMarker
from jouleprof.timeline.recorder import ListSpanSink, PhaseRecorder, RecorderConfig
from jouleprof.types import RunRecord

# -- host mode ---------------------------------------------------------------------------------


def _tick(clock: ManualClock, s: float = 0.001) -> None:
    clock.advance_s(s)


def test_host_mode_nested_names_order_and_step_numbers():
    clock = ManualClock()
    rec = PhaseRecorder(clock, device="cpu")
    assert rec.mode == "host"
    marker: PhaseMarker = rec  # the workloads' interface
    assert callable(marker.step) and callable(marker.phase)
    for _ in range(3):
        with rec.step() as step:
            assert isinstance(step, int)
            with rec.phase("data"):
                _tick(clock)
            with rec.phase("forward"):
                _tick(clock)
                with rec.phase("target"):
                    _tick(clock)
                with rec.phase("context"), rec.phase("attn"):
                    _tick(clock)
            with rec.phase("my custom phase"):
                _tick(clock)
    rec.close()
    spans = rec.sink.spans
    assert [s.step for s in spans] == [0] * 6 + [1] * 6 + [2] * 6
    names = [s.phase for s in spans if s.step == 1]
    # Spans are emitted as phases close: inner ones first.
    assert names == [
        "data",
        "forward/target",
        "forward/context/attn",
        "forward/context",
        "forward",
        "my custom phase",
    ]
    for s in spans:
        assert s.t0_s <= s.t1_s
        assert (s.t0_s, s.t1_s) == (s.host_t0_s, s.host_t1_s)
    by = {(s.step, s.phase): s for s in spans}
    for step in range(3):
        fwd = by[(step, "forward")]
        for child in ("forward/target", "forward/context", "forward/context/attn"):
            c = by[(step, child)]
            assert fwd.t0_s <= c.t0_s <= c.t1_s <= fwd.t1_s
        assert by[(step, "data")].t1_s <= fwd.t0_s
    # Steps follow each other on the clock.
    starts = [min(s.t0_s for s in spans if s.step == k) for k in range(3)]
    assert starts == sorted(starts)
    assert by[(0, "forward/target")].duration_s == pytest.approx(0.001)
    assert rec.stats.n_steps == 3 and rec.stats.n_phases == 18


def test_exception_inside_phase_closes_span_and_propagates():
    clock = ManualClock()
    rec = PhaseRecorder(clock, device="cpu")
    with pytest.raises(ZeroDivisionError), rec.step(), rec.phase("forward"):
        _tick(clock)
        with rec.phase("inner"):
            _tick(clock)
            _ = 1 / 0
    assert not rec.in_step and rec.open_phases == ()
    assert [s.phase for s in rec.sink.spans] == ["forward/inner", "forward"]
    assert rec.sink.spans[1].duration_s == pytest.approx(0.002)
    # The recorder keeps working after the exception.
    with rec.step(), rec.phase("forward"):
        _tick(clock)
    assert rec.sink.spans[-1].step == 1


def test_spans_reach_the_sink_step_by_step():
    clock = ManualClock()
    sink = ListSpanSink()
    rec = PhaseRecorder(clock, sink, device="cpu")
    for k in range(4):
        with rec.step():
            with rec.phase("forward"):
                _tick(clock)
            with rec.phase("backward"):
                _tick(clock)
            # Nothing of this step is written before it ends...
            assert all(s.step < k for s in sink.spans)
        # ...and all of it right after.
        assert len(sink.spans) == 2 * (k + 1)
        assert sink.n_writes == k + 1


def test_phases_outside_a_step_belong_to_the_next_step():
    clock = ManualClock()
    rec = PhaseRecorder(clock, device="cpu")
    with rec.phase("data"):
        _tick(clock)
    with rec.step(), rec.phase("forward"):
        _tick(clock)
    # A fetch begun before the step and ended inside it counts with the step.
    rec.begin_phase("data")
    _tick(clock)
    rec.begin_step()
    rec.end_phase("data")
    with rec.phase("forward"):
        _tick(clock)
    rec.end_step()
    rec.close()
    assert [(s.step, s.phase) for s in rec.sink.spans] == [
        (0, "data"),
        (0, "forward"),
        (1, "data"),
        (1, "forward"),
    ]


def test_explicit_boundaries_tolerate_out_of_order_ends():
    clock = ManualClock()
    rec = PhaseRecorder(clock, device="cpu")
    rec.begin_step()
    rec.end_phase("backward")  # never opened: ignored, counted
    rec.begin_phase("forward")
    rec.begin_phase("layer1")
    _tick(clock)
    rec.end_phase("forward")  # closes layer1 too
    rec.begin_phase("optimizer")
    _tick(clock)
    rec.end_step()  # closes the optimizer phase
    assert rec.stats.n_unmatched_ends == 1
    assert rec.stats.n_forced_closes == 2
    assert [s.phase for s in rec.sink.spans] == ["forward/layer1", "forward", "optimizer"]
    with pytest.raises(RuntimeError, match="do not nest"), rec.step(), rec.step():
        pass


def test_discard_phase_and_close_resolves_everything():
    clock = ManualClock()
    rec = PhaseRecorder(clock, device="cpu")
    rec.begin_step()
    rec.begin_phase("data")
    rec.discard_phase()
    rec.begin_phase("forward")
    _tick(clock)
    rec.close()  # closes the open phase and step
    assert [s.phase for s in rec.sink.spans] == ["forward"]
    rec.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        rec.begin_step()


def test_bad_phase_names_and_config():
    rec = PhaseRecorder(ManualClock(), device="cpu")
    with pytest.raises(ValueError, match="phase name"):
        rec.phase("")
    with pytest.raises(ValueError, match="'/'"):
        rec.phase("a/b")
    with pytest.raises(ValueError, match="max_pending_steps"):
        RecorderConfig(max_pending_steps=0)
    with pytest.raises(ValueError, match="anchor_interval_s"):
        RecorderConfig(anchor_interval_s=0.01)
    with pytest.raises(ValueError, match="power of two"):
        RecorderConfig(timing_sample_every=3)


def test_writes_spans_csv_and_stats_to_run_record(tmp_path):
    rd = RunDir.create(tmp_path / "run", RunRecord(run_id="r", kind="test"))
    record = RunRecord(run_id="r", kind="test")
    clock = MonotonicClock()
    rec = PhaseRecorder(clock, rd.span_writer(), device="cpu", record=record)
    for _ in range(5):
        with rec.step():
            with rec.phase("forward"):
                pass
            with rec.phase("backward"):
                pass
    # Incremental: the file already holds the resolved steps before close.
    assert len(rd.read_spans()) == 10
    rec.close()
    df = rd.read_spans()
    assert list(df.columns[:6]) == ["step", "phase", "t0_s", "t1_s", "host_t0_s", "host_t1_s"]
    assert sorted(set(df["phase"])) == ["backward", "forward"]
    assert record.extra["phase_recorder"]["n_steps"] == 5
    assert record.extra["phase_recorder"]["mode"] == "host"


def test_host_overhead_per_boundary_is_small():
    rec = PhaseRecorder(
        MonotonicClock(), device="cpu", config=RecorderConfig(timing_sample_every=1)
    )
    for _ in range(2000):
        with rec.step():
            for _ in range(5):
                with rec.phase("forward"):
                    pass
    us = rec.stats.host_us_per_boundary
    assert us is not None and us < 20  # about 0.3 µs on a laptop core; loose for CI


# -- the clock map (pure) -------------------------------------------------------------------


def test_clock_map_recovers_drift_and_offset():
    drift, offset = 80e-6, 12.5  # the GPU timer runs 80 ppm slow; the origin differs

    def host(g):
        return offset + g * (1 + drift)

    anchors = [ClockAnchor(g, host(g), 5e-6) for g in (0.0, 5.0, 10.0, 15.0, 20.0)]
    cmap = ClockMap(anchors)
    for g in (0.0, 0.3, 7.7, 19.99, 20.0):
        assert cmap(g) == pytest.approx(host(g), abs=1e-9)
    # Past the last anchor and before the first: the fitted line goes on.
    assert cmap(30.0) == pytest.approx(host(30.0), abs=1e-9)
    assert cmap(-1.0) == pytest.approx(host(-1.0), abs=1e-9)
    assert cmap.drift_ppm == pytest.approx(80.0, rel=1e-6)


def test_clock_map_follows_a_drift_that_changes():
    # Piecewise: 50 ppm for 100 s, then -30 ppm (e.g. the board warmed up).
    def host(g):
        return g * (1 + 50e-6) if g <= 100 else 100 * (1 + 50e-6) + (g - 100) * (1 - 30e-6)

    anchors = [ClockAnchor(g, host(g)) for g in range(0, 201, 5)]
    cmap = ClockMap(anchors)
    errs = [abs(cmap(g / 10) - host(g / 10)) for g in range(0, 2000)]
    assert max(errs) < 1e-9
    # A single global line would be off by far more.
    single = ClockMap([anchors[0], anchors[-1]])
    assert max(abs(single(g / 10) - host(g / 10)) for g in range(0, 2000)) > 1e-3


def test_clock_map_with_noisy_anchors_and_one_anchor():
    import random

    rng = random.Random(1)
    drift = -40e-6
    anchors = [
        ClockAnchor(g, 3.0 + g * (1 + drift) + rng.uniform(-5e-6, 5e-6), 5e-6)
        for g in [0.0] + [5.0 * k for k in range(1, 60)]
    ]
    cmap = ClockMap(anchors)
    for g in (1.0, 100.0, 290.0, 400.0):
        assert cmap(g) == pytest.approx(3.0 + g * (1 + drift), abs=3e-5)
    one = ClockMap([ClockAnchor(2.0, 7.0)])
    assert one(3.0) == pytest.approx(8.0) and one.drift_ppm == 0.0
    # Two anchors close together: interpolate between them, but extrapolate at rate 1, since
    # their bracketing error would tilt a fitted slope (here 1 µs over 50 ms: 20 ppm).
    short = ClockMap([ClockAnchor(0.0, 0.0, 1e-6), ClockAnchor(0.05, 0.050001, 1e-6)])
    assert short(0.025) == pytest.approx(0.0250005, abs=1e-12)
    assert short(10.05) == pytest.approx(10.050001, abs=1e-12)


def test_clock_map_thins_close_anchors_keeping_the_tighter():
    a = [
        ClockAnchor(0.0, 0.0, 1e-6),
        ClockAnchor(10.0, 10.0, 5e-5),
        ClockAnchor(10.0001, 10.0, 1e-6),
    ]
    cmap = ClockMap(a)  # the last two are 100 µs apart and would make the map run backwards
    assert [x.gpu_s for x in cmap.anchors] == [0.0, 10.0001]
    with pytest.raises(ValueError, match="backwards"):
        ClockMap([ClockAnchor(0.0, 5.0), ClockAnchor(10.0, 4.0)])
    with pytest.raises(ValueError, match="at least one"):
        ClockMap([])


# -- the CUDA-event path on a fake GPU ------------------------------------------------------


class FakeGPU:
    """A GPU that runs queued work in order, with its own timer that drifts from the host's.

    Times are real `perf_counter_ns` host times (true time); the GPU's timer reads
    `true * (1 + drift) + offset`. `launch(d)` queues d seconds of work; an event recorded on
    the compute stream completes when the queue reaches it, one on another stream at once.
    """

    def __init__(self, drift: float = 500e-6, offset_s: float = 1234.5, latency_s: float = 5e-6):
        self.drift, self.offset_s, self.latency_s = drift, offset_s, latency_s
        self.tail_s = 0.0  # true time at which the compute queue is done
        self.events: list[FakeEvent] = []
        gpu = self

        class _Cuda:
            Event = lambda enable_timing=True: FakeEvent(gpu)  # noqa: E731

            @staticmethod
            def Stream(device=None):
                return FakeStream("side")

            @staticmethod
            def current_stream(device=None):
                return FakeStream("compute")

            @staticmethod
            def synchronize(device=None):
                gpu.wait_until(gpu.tail_s)

            @staticmethod
            def device(device):
                return contextlib.nullcontext()

        self.cuda = _Cuda

    @staticmethod
    def now_s() -> float:
        return time.perf_counter_ns() / 1e9

    def wait_until(self, t_s: float) -> None:
        while self.now_s() < t_s:
            pass

    def launch(self, duration_s: float) -> None:
        self.tail_s = max(self.tail_s, self.now_s() + self.latency_s) + duration_s

    def timer(self, true_s: float) -> float:
        return true_s * (1 + self.drift) + self.offset_s


class FakeStream:
    def __init__(self, kind: str) -> None:
        self.kind = kind

    def synchronize(self) -> None:
        pass


class FakeEvent:
    def __init__(self, gpu: FakeGPU) -> None:
        self.gpu = gpu
        self.true_s: float | None = None

    def record(self, stream: FakeStream | None = None) -> None:
        g = self.gpu
        start = g.now_s() + g.latency_s
        if stream is None or stream.kind == "compute":
            g.tail_s = max(g.tail_s, start)
            self.true_s = g.tail_s
        else:
            self.true_s = start

    def query(self) -> bool:
        return self.true_s is not None and self.gpu.now_s() >= self.true_s

    def synchronize(self) -> None:
        self.gpu.wait_until(self.true_s)

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.query() and end.query(), "elapsed_time on an incomplete event"
        return (self.gpu.timer(end.true_s) - self.gpu.timer(self.true_s)) * 1e3


@pytest.fixture
def fake_gpu(monkeypatch):
    gpu = FakeGPU()
    monkeypatch.setattr(recmod, "_resolve_device", lambda device: (gpu, "cuda:0"))
    return gpu


def _run_fake_steps(rec, gpu, clock, n_steps, work_s=(0.002, 0.004, 0.001)):
    truth = []  # (step, phase, true t0, true t1) on the run's clock
    for k in range(n_steps):
        with rec.step():
            for name, d in zip(("forward", "backward", "optimizer"), work_s, strict=True):
                with rec.phase(name):
                    gpu.launch(d)
                # The phase's GPU interval: it ends where the queue's tail is now.
                truth.append((k, name, d))
    return truth


def test_cuda_events_resolve_onto_the_run_clock_with_drift(fake_gpu):
    clock = MonotonicClock()
    rec = PhaseRecorder(clock, anchor_interval_s=0.5, max_pending_steps=1000)
    assert rec.mode == "cuda-events"
    truth = _run_fake_steps(rec, fake_gpu, clock, 150)  # ~1 s of fake GPU work
    # The host ran ahead of the GPU: most steps are still pending.
    assert rec.pending_steps > 10
    rec.close()
    spans = rec.sink.spans
    assert len(spans) == len(truth)
    assert rec.stats.n_anchors >= 2
    assert rec.stats.drift_ppm == pytest.approx(-500.0, abs=20.0)  # the fake timer runs fast
    by = {(s.step, s.phase): s for s in spans}
    tol = 1e-5 + 2 * max(a.halfwidth_s for a in rec.anchors)  # anchors known to their bracket
    for k, name, d in truth:
        s = by[(k, name)]
        assert s.duration_s == pytest.approx(d, abs=2e-5)
        # The GPU cannot run a phase before the host enqueued it.
        assert s.t0_s >= s.host_t0_s - tol
    # Phases of a step follow each other on the GPU, back to back.
    for k in range(150):
        f, b = by[(k, "forward")], by[(k, "backward")]
        assert b.t0_s == pytest.approx(f.t1_s, abs=2e-5)
    assert rec.stats.max_host_lead_s < tol


def test_cuda_events_mapping_matches_true_time(fake_gpu):
    clock = MonotonicClock()
    rec = PhaseRecorder(clock, anchor_interval_s=None, max_pending_steps=1000)
    marks = []
    for _ in range(40):
        with rec.step(), rec.phase("forward"):
            fake_gpu.launch(0.001)
        marks.append(fake_gpu.tail_s)  # true end of this step's phase (host clock, seconds)
    rec.close()
    tol = 1e-5 + 2 * max(a.halfwidth_s for a in rec.anchors)
    for s, true_end in zip(rec.sink.spans, marks, strict=True):
        assert s.t1_s == pytest.approx(clock.to_clock_s(round(true_end * 1e9)), abs=tol)


def test_cuda_events_resolve_incrementally_and_bound_pending(fake_gpu):
    clock = MonotonicClock()
    sink = ListSpanSink()
    rec = PhaseRecorder(clock, sink, max_pending_steps=4, anchor_interval_s=None)
    for k in range(20):
        with rec.step(), rec.phase("forward"):
            fake_gpu.launch(0.002)
        assert rec.pending_steps <= 5
        if k >= 6:  # old steps were resolved and written before close
            assert len(sink.spans) >= k - 5
    assert rec.stats.n_forced_waits > 0
    # Once the GPU catches up, polling resolves without waiting.
    fake_gpu.wait_until(fake_gpu.tail_s)
    rec.flush()
    assert rec.pending_steps == 0 and len(sink.spans) == 20
    rec.close()
    assert [s.step for s in sink.spans] == list(range(20))


def test_sync_mode_times_on_the_host_after_synchronizing(monkeypatch, fake_gpu):
    clock = MonotonicClock()
    rec = PhaseRecorder(clock, sync=True)
    assert rec.mode == "cuda-sync"
    with rec.step(), rec.phase("forward"):
        fake_gpu.launch(0.003)
    rec.close()
    (s,) = rec.sink.spans
    assert s.duration_s >= 0.003 - 1e-5  # the end waited for the GPU
    assert s.t0_s == s.host_t0_s


def test_host_cost_per_step_adds_the_boundaries_and_the_step_end():
    from jouleprof.timeline.recorder import RecorderStats

    st = RecorderStats(n_steps=10, n_phases=70, n_timed_boundaries=4, timed_boundary_ns=200_000)
    st.step_end_ns = 10 * 30_000  # 30 µs a step end
    # 14 boundaries a step at 50 µs, plus 30 µs: 730 µs.
    assert st.host_us_per_step == pytest.approx(730.0)
    assert st.to_json()["host_us_per_step"] == pytest.approx(730.0)
    assert RecorderStats().host_us_per_step is None
