"""One energy-aware cell: train with L_CE + λ·E, evaluate, infer — each its own measured window.

A cell is one run directory written through `jouleprof.measure`: the sampler runs for the whole
cell (an idle baseline first), and the cell marks three spans on the run's clock —
``train`` (the epochs, device-synchronized at both ends), ``eval`` (test accuracy and E, hooks
on) and ``infer`` (passes over the test set as deployed: hooks off). After the run, each span's
GPU energy is the energy of its window from the cumulative counter, with the counter's bounds
as its interval (`timeline.windows`); the cell's summary in run.json gets accuracy, internal E,
and measured time and energy of training and inference.

Before measuring, a throwaway copy of the model trains a few steps, so cuBLAS/cuDNN set-up and
the allocator's first growth are not billed to the first cell of a process.

Run one cell: ``python -m jouleprof.workloads.energy_aware.cell SPEC OUT_DIR`` (SPEC: a JSON
file or the JSON text itself);
run several in one process: ``... --block BLOCK.json`` (a list of {"spec": ..., "out": ...}).
"""

from __future__ import annotations

import copy
import json
import logging
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jouleprof.workloads.energy_aware.choices import check_choices
from jouleprof.workloads.energy_aware.models import ARCH_FIELDS

log = logging.getLogger(__name__)

EXIT_OOM = 3


@dataclass(frozen=True)
class CellSpec:
    """What one cell trains and how (a study's factors plus its fixed settings)."""

    arch: str = "mlp"
    """Architecture preset (models.ARCHS)."""
    dataset: str = "digits"
    """Dataset name (datasets.DATASETS)."""
    lam: float = 0.0
    """Penalty weight λ (≥ 0)."""
    seed: int = 0
    """Seed of the initialization and of the batch order."""
    kind: str = "l1"
    """What E counts: l1, l2 or nonzero-macs (energy_aware.regularizer)."""
    reduction: str = "sum"
    """E per sample summed ("sum") or per hooked element ("mean"; λ then has the same meaning
    for every model size)."""
    epochs: int = 3
    """Passes over the training set."""
    batch_size: int = 128
    """Training and inference batch size."""
    lr: float = 1e-3
    """AdamW learning rate."""
    infer_passes: int = 5
    """Timed passes over the test set (hooks off)."""
    warmup_steps: int = 3
    """Unmeasured training steps of a throwaway copy before the run (0 to skip)."""
    precision: str = "fp32"
    """fp32, or bf16 (autocast)."""
    arch_overrides: dict[str, Any] = field(default_factory=dict)
    """ArchConfig fields replacing the preset's (width, depth, heads, ...)."""
    data_dir: str | None = None
    """Folder of a local dataset (mnist, fashion-mnist, cifar10)."""
    data_n: int | None = None
    """Generated datasets: images (train + test)."""
    data_side: int | None = None
    """Generated datasets: image side in pixels."""
    device: str = "auto"
    """auto (cuda if available), cuda, cuda:N or cpu."""
    idle_s: float = 0.5
    """Idle baseline sampled before the cell's work (0 to skip)."""
    simulate_gpu_w: float | None = None
    """Testing aid: also measure a simulated GPU at this constant power (figures labelled
    simulated, never measured)."""

    def __post_init__(self) -> None:
        check_choices(self)
        for name in ("epochs", "batch_size", "infer_passes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be ≥ 1, got {getattr(self, name)}")
        if self.warmup_steps < 0 or self.idle_s < 0:
            raise ValueError("warmup_steps and idle_s must be ≥ 0")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        bad = [k for k in self.arch_overrides if k not in ARCH_FIELDS]
        if bad:
            raise ValueError(f"unknown arch_overrides {bad}: valid are {', '.join(ARCH_FIELDS)}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class DataCache:
    """Datasets loaded once per process (a block of cells reuses them)."""

    def __init__(self) -> None:
        self._d: dict[tuple, Any] = {}

    def get(self, spec: CellSpec):
        from jouleprof.workloads.energy_aware.datasets import load_dataset

        key = (spec.dataset, spec.data_dir, spec.data_n, spec.data_side)
        if key not in self._d:
            self._d[key] = load_dataset(spec.dataset, spec.data_dir, spec.data_n, spec.data_side)
        return self._d[key]


def _device(spec: CellSpec):
    import torch

    if spec.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(spec.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {spec.device!r} asked for, but torch sees no CUDA GPU")
    return dev


def _build(spec: CellSpec, data, device):
    import torch

    from jouleprof.energy_aware.regularizer import EnergyRegularizer
    from jouleprof.workloads.energy_aware.models import arch_config, build_model

    torch.manual_seed(spec.seed)
    model = build_model(
        arch_config(spec.arch, **spec.arch_overrides), data.in_shape, data.n_classes
    )
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr)
    reg = EnergyRegularizer(model, kind=spec.kind, schedule=spec.lam, reduction=spec.reduction)
    return model, opt, reg


def _sync(device) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def _warm_up(spec: CellSpec, model, tensors, device) -> None:
    if spec.warmup_steps == 0:
        return
    import torch

    from jouleprof.energy_aware.regularizer import EnergyRegularizer
    from jouleprof.workloads.energy_aware.train import TrainResult, evaluate, infer, train

    m = copy.deepcopy(model)
    reg = EnergyRegularizer(m, kind=spec.kind, schedule=spec.lam, reduction=spec.reduction)
    opt = torch.optim.AdamW(m.parameters(), lr=spec.lr)
    train(
        m,
        reg,
        opt,
        tensors,
        epochs=1,
        batch_size=spec.batch_size,
        seed=spec.seed + 10**6,
        precision=spec.precision,
        max_steps=spec.warmup_steps,
    )
    evaluate(m, reg, tensors, spec.batch_size, spec.precision, TrainResult())
    infer(m, reg, tensors, spec.batch_size, spec.precision, 1)
    reg.detach()
    _sync(device)
    del m, opt


def run_cell(spec: CellSpec, out: Path, cache: DataCache | None = None) -> dict[str, Any]:
    """Run one cell into the run directory `out`; returns its summary (figures as JSON)."""
    import torch

    from jouleprof.measurement import MeasureConfig, measure
    from jouleprof.types import RunStatus, Span
    from jouleprof.workloads.energy_aware.models import parameter_count
    from jouleprof.workloads.energy_aware.train import TrainResult, evaluate, infer, train

    t_setup = time.perf_counter()
    device = _device(spec)
    data = (cache or DataCache()).get(spec)
    from jouleprof.workloads.energy_aware.train import device_tensors

    tensors = device_tensors(data, device)
    model, opt, reg = _build(spec, data, device)
    _warm_up(spec, model, tensors, device)
    setup_s = time.perf_counter() - t_setup
    gpus = (device.index or 0,) if device.type == "cuda" else None
    cfg = MeasureConfig(
        gpus=gpus if gpus is not None else (),  # a CPU cell measures no GPU
        hardware_gpus=gpus,
        idle_s=spec.idle_s,
        kind="energy-aware-cell",
        rapl=device.type == "cpu",
        simulate_gpu_w=spec.simulate_gpu_w,
    )
    res = TrainResult()
    spans: dict[str, tuple[float, float]] = {}
    oom = False
    run_config = {"cell": spec.to_json(), "data": data.describe()}
    try:
        with measure(out, cfg, run_config=run_config) as m:
            writer = m.span_writer()
            try:
                for phase in ("train", "eval", "infer"):
                    _sync(device)
                    t0 = m.clock.now_s()
                    if phase == "train":
                        train(
                            model,
                            reg,
                            opt,
                            tensors,
                            epochs=spec.epochs,
                            batch_size=spec.batch_size,
                            seed=spec.seed,
                            precision=spec.precision,
                            result=res,
                        )
                    elif phase == "eval":
                        evaluate(model, reg, tensors, spec.batch_size, spec.precision, res)
                    else:
                        res.infer_samples = infer(
                            model, reg, tensors, spec.batch_size, spec.precision, spec.infer_passes
                        )
                    _sync(device)
                    spans[phase] = (t0, m.clock.now_s())
                    writer.write([Span(0, phase, t0, spans[phase][1], t0, spans[phase][1])])
                    writer.flush()
            finally:
                writer.close()
    except torch.cuda.OutOfMemoryError:
        oom = True
    from jouleprof.store.rundir import RunDir

    rd = RunDir(out)
    rec = rd.read_record()
    rec.extra["setup_s"] = round(setup_s, 3)
    rec.extra["train"] = asdict(res)
    rec.extra["spans_s"] = {k: list(v) for k, v in spans.items()}
    rec.extra["regularizer"] = {"kind": reg.kind, "layers": list(reg.layers), "unit": reg.unit}
    if oom:
        rec.extra["oom"] = True
        rec.status = RunStatus.FAILED
        rec.notes.append("CUDA out of memory: the cell's size does not fit this GPU")
    else:
        from jouleprof.workloads.energy_aware.figures import cell_figures

        samples = rd.read_samples() if rd.has("samples.csv") else None
        rec.summary.update(
            cell_figures(
                rec,
                samples,
                spans,
                res,
                reg.unit,
                parameter_count(model),
                on_cpu=device.type == "cpu",
            )
        )
    rd.write_record(rec)
    reg.detach()
    return {k: f.to_json() for k, f in rec.summary.items()}


def run_block(items: list[tuple[CellSpec, Path]]) -> list[tuple[Path, str | None]]:
    """Run several cells in this process, one after another, each into its own run directory.
    A cell that raises leaves its error in its error.txt and the block goes on. Returns
    (out, error or None) per cell."""
    cache = DataCache()
    done: list[tuple[Path, str | None]] = []
    for spec, out in items:
        try:
            run_cell(spec, out, cache)
            done.append((out, None))
        except Exception as e:  # a cell's failure is its row, never the block's end
            from jouleprof.bench.matrix import write_cell_error

            done.append((out, write_cell_error(out, e)))
    return done


def spec_from_json(d: dict[str, Any]) -> CellSpec:
    return CellSpec(**d)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "--block":
        items = json.loads(Path(args[1]).read_text())
        res = run_block([(spec_from_json(i["spec"]), Path(i["out"])) for i in items])
        bad = [str(o) for o, e in res if e]
        for o, e in res:
            if e:
                print(f"cell {o} failed: {e}", file=sys.stderr)
        return 1 if bad else 0
    if len(args) != 2:
        print(
            "usage: python -m jouleprof.workloads.energy_aware.cell SPEC.json OUT_DIR\n"
            "       python -m jouleprof.workloads.energy_aware.cell --block BLOCK.json",
            file=sys.stderr,
        )
        return 2
    out = Path(args[1])
    try:
        text = args[0] if args[0].lstrip().startswith("{") else Path(args[0]).read_text()
        spec = spec_from_json(json.loads(text))
        run_cell(spec, out)
        from jouleprof.store.rundir import RunDir

        return EXIT_OOM if RunDir(out).read_record().extra.get("oom") else 0
    except Exception as e:
        from jouleprof.bench.matrix import write_cell_error

        print(f"cell failed: {write_cell_error(out, e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
