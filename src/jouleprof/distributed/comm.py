"""Communication as a phase of its own: all-reduce, all-gather and reduce-scatter, seen where
they can be.

Collectives overlap the backward pass, so they are not nested phases of the step: each is a
span of its own in comm_spans.csv (kind, t0_s, t1_s, bytes), on the run's clock, beside
spans.csv. They are seen two ways:

- `CommRecorder.patch()`: wraps torch.distributed.all_reduce / all_gather_into_tensor /
  reduce_scatter_tensor / all_gather / reduce_scatter / all_gather_single /
  reduce_scatter_single while active (FSDP2 and user code call these); an asynchronous call
  is timed from its issue to the host's `wait()`;
- `CommRecorder.ddp_hook`: a DDP communication hook that all-reduces each gradient bucket and
  times it from the hook to the completion of its future.

The times are host times: on a GPU a span ends when the host learned the collective was done,
an upper bound of its device time. Tensor parallelism's functional collectives (DTensor) are
not intercepted: their bytes are the analytic counts of predict.train_features.
"""

from __future__ import annotations

import csv
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

COMM_SPANS_CSV = "comm_spans.csv"
COMM_COLUMNS = ("kind", "t0_s", "t1_s", "bytes")
_PATCHED = (
    "all_reduce",
    "all_gather_into_tensor",
    "reduce_scatter_tensor",
    "all_gather",
    "reduce_scatter",
    "all_gather_single",
    "reduce_scatter_single",
)


_BUFFER_KW = (
    "tensor",
    "output",
    "input",
    "output_tensor",
    "input_tensor",
    "output_tensor_list",
    "input_tensor_list",
    "tensor_list",
)


def _kind(name: str) -> str:
    if name == "all_reduce":
        return "allreduce"
    return "allgather" if "gather" in name else "reducescatter"


@dataclass
class CommSpan:
    kind: str
    t0_ns: int
    t1_ns: int
    bytes: int


def _nbytes(x: Any) -> int:
    import torch

    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(t) for t in x)
    return 0


class _TimedWork:
    """Forwards to a c10d Work; records the span when waited on."""

    def __init__(self, work, rec: CommRecorder, kind: str, t0_ns: int, nbytes: int) -> None:
        self._work, self._rec, self._kind, self._t0, self._bytes = work, rec, kind, t0_ns, nbytes
        self._done = False

    def wait(self, *a, **kw):
        r = self._work.wait(*a, **kw)
        if not self._done:
            self._done = True
            self._rec.add(self._kind, self._t0, time.perf_counter_ns(), self._bytes)
        return r

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


class CommRecorder:
    """Collects communication spans of one process."""

    def __init__(self) -> None:
        self.spans: list[CommSpan] = []
        self._lock = threading.Lock()

    def add(self, kind: str, t0_ns: int, t1_ns: int, nbytes: int) -> None:
        with self._lock:
            self.spans.append(CommSpan(kind, t0_ns, t1_ns, nbytes))

    @contextmanager
    def patch(self):
        """Time the torch.distributed collectives called while active."""
        import torch.distributed as dist

        saved = {name: getattr(dist, name) for name in _PATCHED if hasattr(dist, name)}

        def wrap(name, fn):
            kind = _kind(name)

            def timed(*args, **kwargs):
                t0 = time.perf_counter_ns()
                # the full buffer: the output of a gather, the input of a scatter
                # (FSDP2 passes reduce_scatter_tensor's buffers as output=/input= keywords)
                tensors = [*args[:2], *(v for k, v in kwargs.items() if k in _BUFFER_KW)]
                nbytes = max((_nbytes(t) for t in tensors), default=0)
                work = fn(*args, **kwargs)
                if kwargs.get("async_op") and work is not None:
                    return _TimedWork(work, self, kind, t0, nbytes)
                self.add(kind, t0, time.perf_counter_ns(), nbytes)
                return work

            timed.__wrapped__ = fn
            return timed

        for name, fn in saved.items():
            setattr(dist, name, wrap(name, fn))
        try:
            yield self
        finally:
            for name, fn in saved.items():
                setattr(dist, name, fn)

    def ddp_hook(self, state: Any, bucket):
        """A DDP comm hook: the default all-reduce (averaged), timed."""
        import torch.distributed as dist

        t0 = time.perf_counter_ns()
        buf = bucket.buffer()
        nbytes = buf.numel() * buf.element_size()
        world = dist.get_world_size()
        fut = dist.all_reduce(buf, async_op=True).get_future()

        def done(f):
            self.add("allreduce", t0, time.perf_counter_ns(), nbytes)
            return f.value()[0].div_(world)

        return fut.then(done)

    def attach(self, model) -> bool:
        """Time a DDP model's gradient all-reduce (call before its first backward)."""
        if hasattr(model, "register_comm_hook"):
            model.register_comm_hook(None, self.ddp_hook)
            return True
        return False

    def clear(self) -> None:
        with self._lock:
            self.spans.clear()

    def finish(self, measurement) -> None:
        """Write comm_spans.csv into the measurement's run directory and run.json extra.comm
        (per kind: calls, bytes, host seconds)."""
        self.write(measurement.run_dir.path, measurement.clock.origin_ns)
        measurement.record.extra["comm"] = {
            "kinds": self.summary(),
            "how": "host-timed spans (torch.distributed calls wrapped; DDP buckets by comm hook)",
            "not_seen": "tensor parallelism's functional collectives (DTensor)",
        }

    def summary(self) -> dict[str, dict[str, float]]:
        """Per kind: calls, bytes and host seconds (spans overlapping each other are merged)."""
        out: dict[str, dict[str, float]] = {}
        for kind in sorted({s.kind for s in self.spans}):
            ss = sorted((s for s in self.spans if s.kind == kind), key=lambda s: s.t0_ns)
            busy, end = 0, None
            for s in ss:
                t0 = s.t0_ns if end is None else max(s.t0_ns, end)
                if s.t1_ns > t0:
                    busy += s.t1_ns - t0
                end = s.t1_ns if end is None else max(end, s.t1_ns)
            out[kind] = {
                "calls": len(ss),
                "bytes": float(sum(s.bytes for s in ss)),
                "time_s": busy / 1e9,
            }
        return out

    def write(self, path: Path, origin_ns: int) -> Path:
        """comm_spans.csv with times on the run clock whose origin is `origin_ns`."""
        p = Path(path) / COMM_SPANS_CSV
        with p.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(COMM_COLUMNS)
            for s in sorted(self.spans, key=lambda s: s.t0_ns):
                w.writerow(
                    [
                        s.kind,
                        repr((s.t0_ns - origin_ns) / 1e9),
                        repr((s.t1_ns - origin_ns) / 1e9),
                        s.bytes,
                    ]
                )
        return p
