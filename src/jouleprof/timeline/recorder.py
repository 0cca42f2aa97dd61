"""The phase recorder: `with rec.step():` / `with rec.phase("forward"):` in any PyTorch loop.

Three ways to time a phase boundary (`PhaseRecorder.mode`):

* ``cuda-events`` (default where CUDA is in use): a CUDA event recorded on the current stream.
  Nothing waits for the GPU on the hot path. Completed steps are found a few steps later with
  `event.query()` and resolved onto the run's clock then (or at `flush`/`close`); a step's
  spans go to the sink as soon as it is resolved, so a crash loses only the pending steps.
* ``cuda-sync`` (`sync=True`): the classic method, `torch.cuda.synchronize()` at every
  boundary and the host clock read after it. For comparison only: it slows a step by 8–15%.
* ``host``: no CUDA: host timestamps only (t0_s = host_t0_s).

The CUDA events themselves (the event pool, the clock anchors taken on a side stream, and
resolving completed steps onto the run's clock) live in `cuda_events.py`; this module keeps
the steps, the phase stack, the modes and the sinks.

Every boundary also keeps the host time at which the host passed it (host_t0_s, host_t1_s):
the host enqueues work before the GPU runs it, so a GPU time mapped earlier than its host time
is a mapping error, and `stats.max_host_lead_s` reports the largest one seen.

Threading: one training loop drives a recorder. Autograd hooks may call it from autograd's
device thread while the loop's thread waits inside `backward()`, which is safe; two loops
driving one recorder at once are not supported.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from jouleprof.timeline.clockmap import ClockAnchor
from jouleprof.timeline.cuda_events import CudaEventTimer
from jouleprof.types import Span

log = logging.getLogger(__name__)

_perf_ns = time.perf_counter_ns


class SpanSink(Protocol):
    """Where resolved spans go (spans.csv through `SpanWriter`, or a list)."""

    def write(self, spans: Sequence[Span]) -> None: ...

    def flush(self) -> None: ...


class ListSpanSink:
    """Keeps spans in memory: for tests and short API measurements."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.n_writes = 0

    def write(self, spans: Sequence[Span]) -> None:
        self.spans.extend(spans)
        self.n_writes += 1

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class RecorderConfig:
    """How the recorder times boundaries."""

    sync: bool = False
    """Synchronize the device at every boundary and time it on the host (the classic, slow way)."""
    max_pending_steps: int = 32
    """Steps whose events may wait unresolved; past this the host waits for the oldest one
    (which is that many steps behind, so the GPU's queue never drains)."""
    anchor_interval_s: float | None = 5.0
    """Seconds between cheap side-stream anchors taken at step ends; None: start and close only."""
    max_anchor_width_s: float = 5e-4
    """A cheap anchor whose host bracket is wider than this is dropped."""
    timing_sample_every: int = 64
    """Every n-th boundary's host cost is measured (a power of two)."""
    events_prealloc: int = 256
    """CUDA events made up front (the pool grows when it runs out)."""

    def __post_init__(self) -> None:
        if self.max_pending_steps < 1:
            raise ValueError(f"max_pending_steps must be ≥ 1, got {self.max_pending_steps}")
        if self.anchor_interval_s is not None and not self.anchor_interval_s >= 0.5:
            raise ValueError(
                f"anchor_interval_s must be ≥ 0.5 s or None, got {self.anchor_interval_s}"
            )
        if not self.max_anchor_width_s > 0:
            raise ValueError(f"max_anchor_width_s must be > 0, got {self.max_anchor_width_s}")
        n = self.timing_sample_every
        if n < 1 or n & (n - 1):
            raise ValueError(f"timing_sample_every must be a power of two ≥ 1, got {n}")
        if self.events_prealloc < 0:
            raise ValueError(f"events_prealloc must be ≥ 0, got {self.events_prealloc}")


@dataclass
class RecorderStats:
    """What recording cost and how well the clocks were tied (for run.json)."""

    mode: str = "host"
    n_steps: int = 0
    n_phases: int = 0
    """Phase occurrences recorded (resolved or pending)."""
    n_spans_written: int = 0
    max_pending_steps: int = 0
    """The most steps that waited unresolved at once."""
    n_forced_waits: int = 0
    """Times the host waited for an old step because too many were pending."""
    n_unmatched_ends: int = 0
    """`end_phase(name)` calls for a phase that was not open (ignored)."""
    n_forced_closes: int = 0
    """Phases closed because an enclosing phase or the step ended first."""
    n_anchors: int = 0
    n_rejected_anchors: int = 0
    drift_ppm: float | None = None
    max_host_lead_s: float | None = None
    """Largest (host time − mapped GPU time) of a boundary: > 0 is a mapping error."""
    n_timed_boundaries: int = 0
    timed_boundary_ns: int = 0
    step_end_ns: int = 0
    """Host time spent in `end_step` (resolving events, anchors), all steps together."""

    @property
    def host_us_per_boundary(self) -> float | None:
        """Mean host cost of one boundary (of those measured), in microseconds."""
        if not self.n_timed_boundaries:
            return None
        return self.timed_boundary_ns / self.n_timed_boundaries / 1e3

    @property
    def host_us_per_step(self) -> float | None:
        """The recorder's host time per step, in microseconds: its phase boundaries (at the
        sampled mean cost) and its step end. On a step the host paces, the most the recorder
        can slow it; on one the GPU paces, the host's lead hides it."""
        per_boundary = self.host_us_per_boundary
        if per_boundary is None or not self.n_steps:
            return None
        boundaries = 2 * self.n_phases / self.n_steps
        return boundaries * per_boundary + self.step_end_ns / self.n_steps / 1e3

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["host_us_per_boundary"] = self.host_us_per_boundary
        d["host_us_per_step"] = self.host_us_per_step
        return d


class _PhaseCtx:
    __slots__ = ("_rec", "_name")

    def __init__(self, rec: PhaseRecorder, name: str) -> None:
        self._rec = rec
        self._name = name

    def __enter__(self) -> None:
        self._rec.begin_phase(self._name)

    def __exit__(self, *exc: object) -> None:
        self._rec.end_phase()


class _StepCtx:
    __slots__ = ("_rec",)

    def __init__(self, rec: PhaseRecorder) -> None:
        self._rec = rec

    def __enter__(self) -> int:
        return self._rec.begin_step()

    def __exit__(self, *exc: object) -> None:
        self._rec.end_step()


def _resolve_device(device: Any) -> tuple[Any, Any]:
    """(torch, torch.device) for CUDA recording, or (None, None) for host timestamps."""
    if device is not None and str(device) == "cpu":
        return None, None
    try:
        import torch
    except ImportError:
        if device is not None:
            raise ValueError(f"device={device!r} needs torch, which is not installed") from None
        return None, None
    if device is None:
        if not torch.cuda.is_available():
            return None, None
        if not torch.cuda.is_initialized():
            log.info(
                "CUDA is available but not initialized yet: recording host timestamps; "
                "pass device='cuda' to time phases with CUDA events"
            )
            return None, None
        return torch, torch.device("cuda", torch.cuda.current_device())
    dev = torch.device(device)
    if dev.type != "cuda":
        raise ValueError(f"device must be a CUDA device, 'cpu' or None; got {device!r}")
    if not torch.cuda.is_available():
        raise ValueError(f"device={device!r} was asked for, but CUDA is not available here")
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return torch, dev


class PhaseRecorder:
    """Records steps and (nested) phases as spans on the run's clock; a `PhaseMarker`.

    Args:
        clock: the run's clock (`Measurement.clock`). A clock with `to_clock_s` (the
            `MonotonicClock`) is read through `perf_counter_ns`; any other (`ManualClock` in
            tests) through `now_s()`.
        sink: where resolved spans go; default an in-memory `ListSpanSink` (`.sink.spans`).
        device: a CUDA device to time with events; None: the current CUDA device if CUDA is
            available and initialized, else host timestamps; "cpu": host timestamps.
        sync: synchronize at every boundary (mode ``cuda-sync``) instead of events.
        max_pending_steps, anchor_interval_s: see `RecorderConfig`.
        config: a full `RecorderConfig` (replaces the two arguments above and `sync`).
        close_sink: `close()` also closes the sink (the recorder is its only writer).
        record: a `RunRecord` whose `extra["phase_recorder"]` gets `stats` at `close()`.
        excite: an `ExciteConfig` (`timeline.excite`): short random gaps between the phases
            of some steps of a calibration window, recorded as phase ``excite_gap``, so that
            attribution can tell phases apart; None: none (the default).
        repeat: a `RepeatConfig` (`timeline.repeat`), or True for its defaults: in a share of
            the steps of a calibration window, the phases run through `replay()` run twice,
            so that attribution can tell them from their neighbours; None: each runs once.

    Phases outside any step belong to the step that begins next (a "data" fetch before
    `step()` is counted with the step it feeds). Steps are numbered from 0.
    """

    enabled = True

    def __init__(
        self,
        clock: Any,
        sink: SpanSink | None = None,
        *,
        device: Any = None,
        sync: bool = False,
        max_pending_steps: int = 32,
        anchor_interval_s: float | None = 5.0,
        config: RecorderConfig | None = None,
        close_sink: bool = True,
        record: Any = None,
        excite: Any = None,
        repeat: Any = None,
    ) -> None:
        from jouleprof.timeline.repeat import Repeater, repeat_config

        repeat_cfg = repeat_config(repeat)
        self.config = config or RecorderConfig(
            sync=sync, max_pending_steps=max_pending_steps, anchor_interval_s=anchor_interval_s
        )
        self.clock = clock
        self.sink: SpanSink = sink if sink is not None else ListSpanSink()
        self._close_sink = close_sink
        self._record = record
        if hasattr(clock, "to_clock_s"):
            self._stamp = _perf_ns
            self._to_s = clock.to_clock_s
        else:
            self._stamp = lambda: round(clock.now_s() * 1e9)
            self._to_s = lambda ns: ns / 1e9
        self._torch, self.device = _resolve_device(device)
        if self._torch is None:
            self.mode = "host"
        elif self.config.sync:
            self.mode = "cuda-sync"
        else:
            self.mode = "cuda-events"
        self.stats = RecorderStats(mode=self.mode)
        self._sample_mask = self.config.timing_sample_every - 1
        self._n_boundaries = 0
        # Hot-path state. Stack entries: (path, leaf name, host ns, event, anchor index).
        self._stack: list[tuple[str, str, int, Any, int]] = []
        self._paths: dict[str, dict[str, str]] = {}
        self._ctx: dict[str, _PhaseCtx] = {}
        self._step_ctx = _StepCtx(self)
        self._group: list[tuple] | None = None  # closed phases of the open step
        self._step_depth = 0
        self._step = -1
        self._next_step = 0
        self._pending: deque[tuple[int, list[tuple]]] = deque()
        self._closed = False
        # Boundary stamps: (host ns, event or None, anchor index).
        self._events: CudaEventTimer | None = None
        if self.mode == "host":
            self._mark = self._mark_host
        elif self.mode == "cuda-sync":
            self._mark = self._mark_sync
        else:
            self._events = CudaEventTimer(
                self._torch, self.device, self.config, self.stats, self._to_s
            )
            self._mark = self._events.mark
        self._excite = None
        if excite is not None:
            from jouleprof.timeline.excite import Exciter

            self._excite = Exciter(excite, clock, self._torch, self.device)
        self._repeat = Repeater(repeat_cfg, clock) if repeat_cfg is not None else None

    # -- the PhaseMarker interface -----------------------------------------------------------

    def step(self) -> _StepCtx:
        """Context of one training step (yields the step's number)."""
        return self._step_ctx

    def phase(self, name: str) -> _PhaseCtx:
        """Context of one phase; nested phases are recorded as "parent/child"."""
        ctx = self._ctx.get(name)
        if ctx is None:
            if not isinstance(name, str):
                raise TypeError(f"a phase name is a str, got {type(name).__name__} {name!r}")
            if not name or "/" in name:
                raise ValueError(f"a phase name must be non-empty and hold no '/': {name!r}")
            ctx = self._ctx[name] = _PhaseCtx(self, name)
        return ctx

    def replay(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run `fn(*args, **kwargs)` as phase `name`; returns what it returns.

        `fn` must be replayable: running it twice has no effect but its cost (a data copy, a
        forward pass under ``no_grad``, a preprocessing kernel; not a backward that accumulates
        gradients, nor an optimizer step). With a `RepeatConfig` (`repeat=`), in a share of the
        steps of its window it runs a second time, back to back, as a second span of the same
        phase, and the second call's result is returned; otherwise once.
        """
        if not callable(fn):
            raise TypeError(
                f"replay({name!r}, fn, ...): fn must be the callable that runs the phase, got "
                f"{type(fn).__name__}; pass it with its arguments: replay('copy', x.to, 'cuda')"
            )
        ctx = self.phase(name)
        with ctx:
            out = fn(*args, **kwargs)
        rp = self._repeat
        if rp is not None and self._group is not None and rp.twice(self._step, name):
            with ctx:
                out = fn(*args, **kwargs)
            rp.repeated(self._step, name)
        return out

    # -- explicit boundaries (for hooks and callbacks) ---------------------------------------

    @property
    def in_step(self) -> bool:
        return self._group is not None

    @property
    def open_phases(self) -> tuple[str, ...]:
        """Paths of the phases open now, outermost first."""
        return tuple(e[0] for e in self._stack)

    def begin_step(self) -> int:
        """Begin a step; returns its number. Steps do not nest."""
        if self._group is not None:
            raise RuntimeError("a step is already open: steps do not nest (end it first)")
        if self._closed:
            raise RuntimeError("this PhaseRecorder is closed")
        self._group = []
        self._step_depth = len(self._stack)
        self._step = self._next_step
        self._next_step += 1
        return self._step

    def end_step(self) -> None:
        """End the open step (closing phases opened inside it) and resolve what is ready."""
        group = self._group
        if group is None:
            return
        t_in = _perf_ns()
        while len(self._stack) > self._step_depth:
            self.stats.n_forced_closes += 1
            self._close_top()
        self._group = None
        self._pending.append((self._step, group))
        self.stats.n_steps += 1
        if self._events is not None:
            self._events.step_ended()
            self._poll()
        else:
            self._resolve_ready()
        self.stats.step_end_ns += _perf_ns() - t_in

    def begin_phase(self, name: str) -> None:
        """Open a phase (nested under the open one, if any)."""
        ex = self._excite
        if ex is not None and self._group and len(self._stack) == self._step_depth:
            ex.before_phase(self, self._step, name)
        n = self._n_boundaries
        self._n_boundaries = n + 1
        timed = not (n & self._sample_mask)
        if timed:
            t_in = _perf_ns()
        stack = self._stack
        if stack:
            parent = stack[-1][0]
            children = self._paths.get(parent)
            if children is None:
                children = self._paths[parent] = {}
            path = children.get(name)
            if path is None:
                path = children[name] = parent + "/" + name
        else:
            path = name
        ns, ev, k = self._mark()
        stack.append((path, name, ns, ev, k))
        if timed:
            self.stats.timed_boundary_ns += _perf_ns() - t_in
            self.stats.n_timed_boundaries += 1

    def end_phase(self, name: str | None = None) -> None:
        """Close the innermost phase, or the open phase called `name` (and any inside it).

        A `name` that is not open is counted in `stats.n_unmatched_ends` and ignored, so a
        hook firing out of order never breaks the training loop.
        """
        stack = self._stack
        if name is not None and (not stack or stack[-1][1] != name):
            for i in range(len(stack) - 1, -1, -1):
                if stack[i][1] == name:
                    break
            else:
                self.stats.n_unmatched_ends += 1
                return
            while len(stack) > i + 1:
                self.stats.n_forced_closes += 1
                self._close_top()
        if not stack:
            self.stats.n_unmatched_ends += 1
            return
        self._close_top()

    def discard_phase(self) -> None:
        """Drop the innermost open phase without recording it (e.g. a fetch that hit the end)."""
        if self._stack:
            ev = self._stack.pop()[3]
            if ev is not None:
                self._events.recycle(ev)

    def _close_top(self) -> None:
        n = self._n_boundaries
        self._n_boundaries = n + 1
        timed = not (n & self._sample_mask)
        if timed:
            t_in = _perf_ns()
        path, _, ns0, ev0, k0 = self._stack.pop()
        ns1, ev1, k1 = self._mark()
        rec = (path, ns0, ev0, k0, ns1, ev1, k1)
        self.stats.n_phases += 1
        if self._group is not None:  # a phase begun before the step and ended in it counts too
            self._group.append(rec)
            if len(self._stack) < self._step_depth:
                self._step_depth = len(self._stack)
        else:  # a phase outside any step: it belongs to the step that begins next
            self._pending.append((self._next_step, [rec]))
        if timed:
            self.stats.timed_boundary_ns += _perf_ns() - t_in
            self.stats.n_timed_boundaries += 1
        if self._group is None:
            if self._events is not None:
                self._poll()
            else:
                self._resolve_ready()

    # -- boundary stamps ---------------------------------------------------------------------

    def _mark_host(self) -> tuple[int, None, int]:
        return self._stamp(), None, 0

    def _mark_sync(self) -> tuple[int, None, int]:
        self._torch.cuda.synchronize(self.device)
        return self._stamp(), None, 0

    # -- resolution --------------------------------------------------------------------------

    def _resolve_ready(self) -> None:
        """Host and sync modes: every closed phase is already final."""
        out: list[Span] = []
        while self._pending:
            step, recs = self._pending.popleft()
            for path, ns0, _, _, ns1, _, _ in recs:
                h0, h1 = self._to_s(ns0), self._to_s(ns1)
                out.append(Span(step, path, h0, max(h1, h0), h0, h1))
        self._emit(out)

    def _emit(self, spans: list[Span]) -> None:
        if spans:
            self.sink.write(spans)
            self.sink.flush()
            self.stats.n_spans_written += len(spans)

    def _poll(self, wait: bool = False) -> None:
        """cuda-events mode: resolve the pending steps whose events have completed."""
        self.stats.max_pending_steps = max(self.stats.max_pending_steps, len(self._pending))
        self._emit(self._events.resolve(self._pending, wait=wait))
        self._events.release_anchor_events(self._stack, self._pending)

    # -- lifecycle ---------------------------------------------------------------------------

    def flush(self, wait: bool = False) -> None:
        """Resolve what is ready (everything, waiting for the GPU, if `wait`) and flush the sink."""
        if self._events is not None:
            self._poll(wait=wait)
        else:
            self._resolve_ready()
        self.sink.flush()

    def close(self) -> None:
        """Close open phases and the step, take the final anchor, resolve everything."""
        if self._closed:
            return
        try:
            while self._stack:
                self.stats.n_forced_closes += 1
                self._close_top()
            self.end_step()
            if self._events is not None:
                self._events.take_anchor(hard=True)
                self._poll(wait=True)
                self.stats.drift_ppm = self._events.drift_ppm()
            else:
                self._resolve_ready()
            self.sink.flush()
        finally:
            self._closed = True
            if self._events is not None:
                self._events.release()
            if self._close_sink and hasattr(self.sink, "close"):
                self.sink.close()
            if self._record is not None:
                self._record.extra["phase_recorder"] = self.stats.to_json()
                if self._excite is not None:
                    self._record.extra["excite"] = self._excite.to_json()
                if self._repeat is not None:
                    self._record.extra["repeat"] = self._repeat.to_json()

    def __enter__(self) -> PhaseRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- introspection -----------------------------------------------------------------------

    @property
    def anchors(self) -> list[ClockAnchor]:
        """The anchors taken so far (cuda-events mode)."""
        return self._events.anchors if self._events is not None else []

    @property
    def exciter(self) -> Any:
        """The `timeline.excite.Exciter` putting excitation gaps, or None."""
        return self._excite

    @property
    def repeater(self) -> Any:
        """The `timeline.repeat.Repeater` deciding which steps replay their phases, or None."""
        return self._repeat

    @property
    def pending_steps(self) -> int:
        return len(self._pending)
