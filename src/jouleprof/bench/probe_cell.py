"""One feasibility-probe cell, measured in this process: `python -m jouleprof.bench.probe_cell
WORKER.json` runs the cells listed there one after another, each into its own directory.

A cell builds the model (adapted, at its precision), resets the peak-memory statistics, trains
`warmup_steps` steps on one random-normal batch, then at least `timed_s` seconds of steps, all
inside `jouleprof.measure` (the energy counter read at every refresh). Its result.json holds
the probe row: seconds per step from the synchronized segment, joules per step from the
counter's window over the segment with its bounds, and the peak allocated memory. An
out-of-memory error is a result (status oom); any other error is recorded with its message.
`marks_s` in result.json says when (seconds from the cell's start) the measurement opened, the
model was ready, the warm-up ended, the window ended, the measurement closed, the window's
energy was read and the cell ended: where its wall time outside the window goes.

Cells that differ only in batch size can share one built model (`share_builds` in the job's
options): the worker keeps a cell's trainer for the next cell of the same model, method,
precision and checkpointing, whose own warm-up, window, peak-memory reset and run directory
follow as for a fresh build; the build (for a 4-bit or 8-bit base, its quantization) is then
paid once. A failed cell never hands its model on.
"""

from __future__ import annotations

import gc
import json
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

RESULT_JSON = "result.json"
EDGE_DENSE_S = 1.0
SHARED_BUILD = "shared with the previous cell (same model, method, precision, checkpointing)"


@dataclass(frozen=True)
class ProbeCell:
    """One point of the probe matrix."""

    model: str
    method: str
    precision: str
    checkpointing: bool
    batch: int

    @property
    def cell_id(self) -> str:
        ck = "ckpt" if self.checkpointing else "nockpt"
        return f"{self.model}_{self.method}_{self.precision}_{ck}_b{self.batch}"

    @property
    def build_key(self) -> tuple[str, str, str, bool]:
        """What the built model depends on: cells with the same key can share one build."""
        return (self.model, self.method, self.precision, self.checkpointing)

    def key(self) -> tuple[str, str, str, str, str]:
        return (
            self.model,
            self.method,
            self.precision,
            "on" if self.checkpointing else "off",
            str(self.batch),
        )


def _is_oom(e: BaseException) -> bool:
    import torch

    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()


def segment_energy(run_dir: Path, t0_s: float, t1_s: float) -> dict[str, Any]:
    """GPU energy of [t0_s, t1_s] from a closed run directory's samples (every measured GPU).

    Returns energy_j, lo_j, hi_j (None where unavailable) and a note: the signal it came from,
    or why there is none.
    """
    from jouleprof.store.rundir import RunDir
    from jouleprof.timeline.summary import best_energy
    from jouleprof.timeline.windows import window_energies

    rd = RunDir(run_dir)
    rec = rd.read_record()
    samples = rd.read_samples() if rd.has("samples.csv") else None
    gpus = (
        sorted(d for d in samples["device"].unique() if str(d).startswith("gpu"))
        if samples is not None and len(samples)
        else []
    )
    none = {"energy_j": None, "lo_j": None, "hi_j": None}
    if not gpus:
        fig = rec.summary.get("gpu_energy_j")
        why = (fig.reason if fig is not None and fig.reason else None) or "no GPU was measured"
        return {**none, "note": f"unavailable: {why}"}
    total = lo = hi = 0.0
    signals = set()
    for dev in gpus:
        w = best_energy(window_energies(samples, dev, t0_s, t1_s))
        if w is None:
            return {**none, "note": f"unavailable: no energy reading on {dev}"}
        total += w.energy_j
        lo += w.lo_j if w.lo_j is not None else w.energy_j
        hi += w.hi_j if w.hi_j is not None else w.energy_j
        signals.add(w.signal + (" (short window)" if w.short else ""))
    note = "measured: " + "+".join(sorted(signals)) + f" over {t1_s - t0_s:.2f} s"
    return {"energy_j": total, "lo_j": lo, "hi_j": hi, "note": note}


def _window_energy(cell_dir: Path, t0_s: float, t1_s: float, steps: int) -> dict[str, Any]:
    e = segment_energy(cell_dir, t0_s, t1_s)
    if e["energy_j"] is None:
        return {"j_per_step": None, "energy_note": e["note"]}
    return {
        "j_per_step": e["energy_j"] / steps,
        "j_per_step_lo": e["lo_j"] / steps,
        "j_per_step_hi": e["hi_j"] / steps,
        "energy_note": e["note"],
    }


def _take(kept: dict[str, Any] | None, key: tuple, torch):
    """A worker's kept trainer if it was built for `key`, else None; `kept` is left empty, and
    a trainer of another build is freed before this cell builds its own."""
    if not kept:
        return None
    same = kept["key"] == key
    trainer = kept["trainer"] if same else None
    kept.clear()
    if not same:
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return trainer


def run_cell(
    cell: ProbeCell, cell_dir: Path, opts: dict[str, Any], kept: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Measure one cell; returns its probe row (also written to cell_dir/result.json).

    `kept`: a worker's shared build (None: build every cell afresh). Where it holds a trainer
    for this cell's `build_key` the cell trains that one (its step counter reset, so schedules
    such as AdaLoRA's start as in a fresh build); after an ok cell it holds this cell's."""
    import torch

    from jouleprof.measurement import MeasureConfig, measure
    from jouleprof.workloads.video.adapt import parameter_counts
    from jouleprof.workloads.video.step import TrainerConfig, VideoTrainer

    t_start = time.perf_counter()
    marks: dict[str, float] = {}  # where the cell's wall time outside its window goes

    def mark(name: str) -> None:
        marks[name] = round(time.perf_counter() - t_start, 4)

    row: dict[str, Any] = {"status": "error"}
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    trainer = None
    reused = _take(kept, cell.build_key, torch)
    try:
        cfg = TrainerConfig(
            model=cell.model,
            method=cell.method,
            precision=cell.precision,
            num_classes=opts["num_classes"],
            batch_size=cell.batch,
            frames=opts.get("frames"),
            size=opts.get("size"),
            lr=opts["lr"],
            checkpointing=cell.checkpointing,
            tiny=opts.get("tiny", False),
            optimizer_impl="fused",
        )
        frames, size = cfg.clip
        mcfg = MeasureConfig(
            gpus=(0,) if device.type == "cuda" else None,
            idle_s=0.0,
            counter_interval_s=0.1,
            counter_dense_s=0.0,
            slow_fields_period_s=0.5,
            rapl=False,
            kind="probe",
        )
        with measure(
            cell_dir, mcfg, run_config={"probe_cell": asdict(cell), "trainer": cfg.to_json()}
        ) as m:
            mark("measure_open")
            b0 = time.perf_counter()
            if reused is not None:
                trainer, reused = reused, None
                trainer.global_step = 0
                row["build"] = SHARED_BUILD
            else:
                trainer = VideoTrainer(cfg, device)
                row["build"] = "built for this cell"
            row["build_s"] = time.perf_counter() - b0
            m.record.extra["probe_build"] = {"build": row["build"], "build_s": row["build_s"]}
            counts = parameter_counts(trainer.model)
            row.update(trainable_params=counts["trainable"], total_params=counts["total"])
            g = torch.Generator(device=device).manual_seed(0)
            x = torch.randn(cell.batch, frames, 3, size, size, device=device, generator=g)
            y = torch.randint(0, cfg.num_classes, (cell.batch,), device=device, generator=g)
            if device.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats(device)
            mark("built")
            for _ in range(opts["warmup_steps"]):
                trainer.train_step(x, y)
            _sync(torch, device)
            mark("warm")
            if m.sampler.devices:
                m.sampler.densify(EDGE_DENSE_S, read_now=True)
            t0_s = m.clock.now_s()
            h0 = time.perf_counter()
            n = 0
            while True:
                trainer.train_step(x, y)
                n += 1
                if n >= opts.get("min_steps", 2) and time.perf_counter() - h0 >= opts["timed_s"]:
                    break
                if opts.get("max_steps") and n >= opts["max_steps"]:
                    break
            _sync(torch, device)
            t1_s = m.clock.now_s()
            mark("window_end")
            if m.sampler.devices:
                m.sampler.densify(EDGE_DENSE_S, read_now=True)
            m.record.extra["probe_segment"] = {"t0_s": t0_s, "t1_s": t1_s, "steps": n}
            m.record.extra["workload_facts"] = trainer.facts()
            peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
            m.record.extra["peak_mem_allocated_bytes"] = peak
        mark("measure_closed")
        row.update(
            status="ok",
            s_per_step=(t1_s - t0_s) / n,
            timed_steps=n,
            timed_s=t1_s - t0_s,
            peak_mem_mib=None if peak is None else peak / 2**20,
        )
        row.update(_window_energy(cell_dir, t0_s, t1_s, n))
        mark("energy")
        if peak is None:
            row["energy_note"] = row.get("energy_note", "") + "; peak memory: no CUDA device"
    except Exception as e:
        if _is_oom(e):
            row.update(status="oom", error=f"out of memory: {str(e).splitlines()[0][:300]}")
        else:
            row.update(
                status="error",
                error=f"{type(e).__name__}: {str(e).splitlines()[0][:400] if str(e) else ''}",
            )
            (cell_dir / "error.txt").parent.mkdir(parents=True, exist_ok=True)
            (cell_dir / "error.txt").write_text(traceback.format_exc())
    finally:
        if kept is not None and row["status"] == "ok" and trainer is not None:
            kept.update(key=cell.build_key, trainer=trainer)
        del trainer, reused
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    row["cell_wall_s"] = time.perf_counter() - t_start
    mark("end")
    row["marks_s"] = marks
    out = {**asdict(cell), **row}
    cell_dir.mkdir(parents=True, exist_ok=True)
    (cell_dir / RESULT_JSON).write_text(json.dumps(out, indent=1, default=str))
    return out


def _sync(torch, device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m jouleprof.bench.probe_cell WORKER.json", file=sys.stderr)
        return 2
    job = json.loads(Path(args[0]).read_text())
    deadline = job.get("deadline_unix")
    kept: dict[str, Any] | None = {} if job["opts"].get("share_builds") else None
    for i, item in enumerate(job["cells"]):
        cell = ProbeCell(**item["cell"])
        if i > 0 and deadline is not None and time.time() >= deadline:
            # The probe's budget is spent: the cells left return to the probe's queue.
            print(f"probe budget spent before {cell.cell_id}: stopping", flush=True)
            return 0
        r = run_cell(cell, Path(item["dir"]), job["opts"], kept)
        print(f"probe cell {cell.cell_id}: {r['status']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
