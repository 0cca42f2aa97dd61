"""`jouleprof run video`: one fine-tuning run of a video classifier, one process, one run directory.

The run (`run_video`):

1. opens the measurement (`jouleprof.measure`: sensors, idle baseline, GPU-sharing check) and
   the phase recorder (data, forward, backward, optimizer of every step, in spans.csv);
2. trains `epochs` epochs; each epoch's training window and its validation pass are timed
   separately (and their peak allocated memory reset and read), so validation never counts as
   training; the test split is evaluated once at the end when asked;
3. measures the deployment cost of the model it trained (`video_deploy`): latency of
   synchronized passes and the energy per clip over a sustained loop;
4. after the measurement closes, from the recorded samples alone: the energy of every window
   with its interval (`scores.costs`), the per-phase split of training (`attribute`,
   proportional), and NetScore, NS_E, NS_M, NS# with the intervals their inputs carry.

Without a GPU the run trains on the CPU and every energy figure is unavailable with the reason
(or, with `simulate_gpu_w`, comes from a simulated GPU and is labelled so). An out-of-memory
error ends the run with `extra["oom"] = True` (a result for a study), data kept.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

RUN_KIND = "video-run"
VIDEO_JSON = "video.json"


@dataclass(frozen=True)
class VideoRunConfig:
    """One run (CLI flags of `jouleprof run video` map onto these)."""

    model: str = "hiera-b"
    """videomae-b, timesformer-b, swin3d-b or hiera-b."""
    method: str = "lora"
    """full, lora, qlora, adalora or bitfit."""
    precision: str = "bf16"
    """fp32, fp16, bf16 or int8."""
    dataset: str = "synthetic"
    """'synthetic' (moving shapes, no download) or a manifest CSV (`jouleprof data manifest`)."""
    cache: str | None = None
    """Frame cache of the manifest (`jouleprof data cache`); None: MANIFEST's name + '_cache'."""
    root: str | None = None
    """Dataset root of the manifest; None: the one it records."""
    epochs: int = 3
    """Training epochs."""
    seed: int = 17
    """Seed of the model's initialization, the data order and the augmentation."""
    lr: float = 1e-4
    """Peak learning rate (AdamW; linear warm-up over the first 5 % of steps, then cosine)."""
    batch_size: int = 4
    """Clips per training step."""
    eval_batch_size: int | None = None
    """Clips per validation/test pass; None: batch_size."""
    checkpointing: bool = False
    """Activation checkpointing of every block."""
    weights: str | None = None
    """Pretrained weights (local path or hub id); None: random initialization."""
    tiny: bool = False
    """A few-layer model of the family (CPU tests and demos)."""
    frames: int | None = None
    """Frames per clip; None: the model's default."""
    size: int | None = None
    """Frame side; None: the model's default."""
    test: bool = False
    """Also evaluate the test split at the end."""
    max_steps_per_epoch: int | None = None
    """Cut every epoch after this many steps (smoke runs); None: whole epochs."""
    num_workers: int | None = None
    """Data-loader worker processes; None: `loader_workers`' default (4, fewer on a machine
    with fewer usable cores)."""
    synthetic_clips: tuple[int, int, int] = (480, 120, 120)
    """Synthetic dataset: clips in train, val, test."""
    deploy: bool = True
    """Measure the deployment cost (inference latency, energy per clip, peak memory)."""
    deploy_batch: int = 1
    """Clips per inference pass."""
    deploy_passes: int = 30
    """Timed synchronized passes for the latency."""
    deploy_sustained_s: float = 10.0
    """Seconds of the sustained inference loop the energy per clip comes from."""
    deploy_from: str | None = None
    """A finished run whose deployment cost this run takes instead of measuring its own, where
    it ran the same model, method, precision, clip and deployment settings on the same GPU
    (`video_deploy.reusable_deployment`); measured here otherwise, with a note saying why."""
    gpus: tuple[int, ...] | None = None
    """GPUs to measure; None: the one the run trains on."""
    idle_s: float = 1.0
    """Idle baseline before the run, seconds."""
    simulate_gpu_w: float | None = None
    """Testing aid: measure a simulated GPU drawing this constant power (labelled simulated)."""

    def __post_init__(self) -> None:
        from jouleprof.workloads.video.adapt import check_method
        from jouleprof.workloads.video.models import get_spec
        from jouleprof.workloads.video.precision import check_pair

        get_spec(self.model)
        check_method(self.method)
        check_pair(self.method, self.precision)
        for name in ("epochs", "batch_size", "deploy_batch", "deploy_passes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be ≥ 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.max_steps_per_epoch is not None and self.max_steps_per_epoch < 1:
            raise ValueError(f"max_steps_per_epoch must be ≥ 1, got {self.max_steps_per_epoch}")
        if self.num_workers is not None and self.num_workers < 0:
            raise ValueError(f"num_workers must be ≥ 0, got {self.num_workers}")
        if not self.deploy_sustained_s > 0:
            raise ValueError(f"deploy_sustained_s must be > 0, got {self.deploy_sustained_s}")
        if len(self.synthetic_clips) != 3 or min(self.synthetic_clips) < 0:
            got = ",".join(str(n) for n in self.synthetic_clips)
            raise ValueError(f"synthetic_clips must be 3 counts ≥ 0 (train,val,test), got {got}")
        if self.dataset != "synthetic" and not self.dataset.endswith(".csv"):
            raise ValueError(
                f"dataset must be 'synthetic' or a manifest .csv, got {self.dataset!r}"
            )

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["gpus"] = None if self.gpus is None else list(self.gpus)
        d["synthetic_clips"] = list(self.synthetic_clips)
        return d


def loader_workers(requested: int | None) -> int:
    """The data-loader workers to start: `requested`, or by default 4, capped at the cores this
    process may run on (more would only contend with each other and with the training loop)."""
    if requested is not None:
        return requested
    from jouleprof.cores import pool_cores

    return min(4, pool_cores())


def _device():
    import torch

    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def _mem(torch, device, reset: bool = False) -> int | None:
    if device.type != "cuda":
        return None
    if reset:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        return None
    torch.cuda.synchronize(device)
    return int(torch.cuda.max_memory_allocated(device))


def _sync(torch, device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


EDGE_DENSE_S = 0.5
"""Seconds of counter reads at every refresh from each edge of a training or validation
window: between edges the counter is read every 0.5 s, which left the first H200 runs' 1–2 s
validation windows with ±80 % bounds; reads at every refresh (100 ms) place both edges within
one refresh."""


def _edge(m) -> None:
    if m.sampler.devices:
        m.sampler.densify(EDGE_DENSE_S, read_now=True)


def lr_at(step: int, total: int, peak: float) -> float:
    """Linear warm-up over the first 5 % of steps (at least one), then cosine to 0."""
    warm = max(1, round(0.05 * total))
    if step < warm:
        return peak * (step + 1) / warm
    frac = (step - warm) / max(1, total - warm)
    return peak * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0)))


def _evaluate(torch, trainer, loader, spec, device, m) -> dict[str, Any]:
    """One pass over a split: top-1, loss, its window on the run clock, peak memory."""
    from jouleprof.workloads.video.models import normalize

    _mem(torch, device, reset=True)
    _sync(torch, device)
    _edge(m)
    t0 = m.clock.now_s()
    correct = torch.zeros((), dtype=torch.long, device=device)
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    n = 0
    for x, y in loader:
        x = normalize(x.to(device, non_blocking=True), spec)
        y = y.to(device, non_blocking=True)
        logits = trainer.eval_logits(x)
        correct += (logits.argmax(1) == y).sum()
        loss_sum += torch.nn.functional.cross_entropy(logits, y, reduction="sum").double()
        n += int(y.shape[0])
    _sync(torch, device)
    t1 = m.clock.now_s()
    _edge(m)
    return {
        "clips": n,
        "correct": int(correct),
        "top1_pct": 100.0 * int(correct) / n if n else None,
        "loss": float(loss_sum) / n if n else None,
        "t0_s": t0,
        "t1_s": t1,
        "time_s": t1 - t0,
        "peak_mem_allocated_bytes": _mem(torch, device),
    }


def run_video(cfg: VideoRunConfig, out: str | Path, on_progress=None) -> Path:
    """Run one fine-tuning run into the run directory `out` (created); returns its path.

    `on_progress(text, keep=False)`, where given, is told what the run is doing: each training
    step's position (transient) and each epoch's loss and validation accuracy (`keep=True`, a
    line to keep). Nothing is synchronized for it: the loss is read where the epoch ends.

    Raises:
        ValueError / JouleprofError: bad configuration or data (before anything is measured).
    """
    import torch

    from jouleprof.data.video_dataset import load_video_data
    from jouleprof.measurement import MeasureConfig, measure
    from jouleprof.timeline.recorder import PhaseRecorder
    from jouleprof.workloads.video.models import get_spec
    from jouleprof.workloads.video.step import TrainerConfig, VideoTrainer

    out = Path(out)
    device = _device()
    spec = get_spec(cfg.model)
    frames, size = TrainerConfig(
        model=cfg.model,
        method=cfg.method,
        precision=cfg.precision,
        tiny=cfg.tiny,
        frames=cfg.frames,
        size=cfg.size,
    ).clip
    # Bad data fails here, before anything is measured.
    data = load_video_data(
        cfg.dataset,
        frames,
        size,
        seed=cfg.seed,
        cache=cfg.cache,
        root=cfg.root,
        synthetic_clips=cfg.synthetic_clips,
        need_test=cfg.test,
    )
    workers = loader_workers(cfg.num_workers)
    data.make_loaders(
        cfg.batch_size,
        cfg.eval_batch_size or cfg.batch_size,
        workers,
        cfg.seed,
        pin=device.type == "cuda",
    )
    steps_per_epoch = len(data.train_loader)
    if cfg.max_steps_per_epoch is not None:
        steps_per_epoch = min(steps_per_epoch, cfg.max_steps_per_epoch)
    if steps_per_epoch < 1:
        raise ValueError(
            f"the train split has {len(data.train)} clips: fewer than one batch of "
            f"{cfg.batch_size}; lower --batch-size"
        )
    total_steps = steps_per_epoch * cfg.epochs
    from jouleprof.workloads.video.adapt import AdaptConfig

    tcfg = TrainerConfig(
        model=cfg.model,
        method=cfg.method,
        precision=cfg.precision,
        num_classes=data.num_classes,
        batch_size=cfg.batch_size,
        frames=frames,
        size=size,
        lr=cfg.lr,
        checkpointing=cfg.checkpointing,
        tiny=cfg.tiny,
        weights=cfg.weights,
        adapt=AdaptConfig(total_steps=total_steps),
        seed=cfg.seed,
    )
    gpus = cfg.gpus
    if gpus is None and device.type == "cuda":
        gpus = (torch.cuda.current_device(),)
    mcfg = MeasureConfig(
        gpus=gpus,
        kind=RUN_KIND,
        counter_interval_s=0.5,
        slow_fields_period_s=0.1,
        idle_s=cfg.idle_s,
        simulate_gpu_w=cfg.simulate_gpu_w,
    )
    if device.type != "cuda" and cfg.gpus is None:
        mcfg = replace(mcfg, gpus=())  # nothing to measure but a simulated GPU, if asked
    run_config = {"video_run": cfg.to_json(), "trainer": tcfg.to_json(), "data": data.describe()}
    video: dict[str, Any] = {"epochs": [], "device": str(device), "num_workers": workers}
    with measure(out, mcfg, run_config=run_config) as m:
        rec = m.record
        rec.extra["video"] = video
        recorder = PhaseRecorder(
            m.clock, m.span_writer(), device=device if device.type == "cuda" else "cpu", record=rec
        )
        try:
            _train_and_deploy(
                torch,
                cfg,
                tcfg,
                data,
                spec,
                device,
                m,
                recorder,
                video,
                steps_per_epoch,
                total_steps,
                VideoTrainer,
                on_progress or (lambda text, keep=False: None),
            )
        except Exception as e:
            if _is_oom(torch, e):
                rec.extra["oom"] = True
                rec.extra["exit_code"] = 1
                rec.notes.append(
                    f"out of memory ({cfg.model} {cfg.method} {cfg.precision}, "
                    f"batch {cfg.batch_size}): {str(e).splitlines()[0]}"
                )
            else:
                raise
        finally:
            recorder.close()
    from jouleprof.bench.video_results import finish_video_run

    finish_video_run(out)
    return out


def _is_oom(torch, e: BaseException) -> bool:
    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()


def _train_and_deploy(
    torch,
    cfg,
    tcfg,
    data,
    spec,
    device,
    m,
    recorder,
    video,
    steps_per_epoch,
    total_steps,
    trainer_cls,
    progress,
) -> None:
    from jouleprof.workloads.video.models import normalize

    progress(f"building {cfg.model} ({cfg.method}, {cfg.precision}) on {device.type}")
    t_build = time.perf_counter()
    trainer = trainer_cls(tcfg, device, marker=recorder)
    video["facts"] = trainer.facts()
    video["build_s"] = round(time.perf_counter() - t_build, 3)
    step = 0
    for epoch in range(cfg.epochs):
        it = iter(data.train_loader)

        def batch(it=it):
            x, y = next(it)
            x = normalize(x.to(device, non_blocking=True), spec)
            return x, y.to(device, non_blocking=True)

        _mem(torch, device, reset=True)
        _sync(torch, device)
        _edge(m)
        t0 = m.clock.now_s()
        losses = []
        for k in range(steps_per_epoch):
            progress(f"epoch {epoch + 1}/{cfg.epochs}: step {k + 1}/{steps_per_epoch}")
            trainer.set_lr(lr_at(step, total_steps, cfg.lr))
            losses.append(trainer.step_on(batch))
            step += 1
        _sync(torch, device)
        t1 = m.clock.now_s()
        _edge(m)
        train = {
            "epoch": epoch,
            "steps": steps_per_epoch,
            "clips": steps_per_epoch * cfg.batch_size,
            "t0_s": t0,
            "t1_s": t1,
            "time_s": t1 - t0,
            "loss": float(torch.stack(losses).float().mean()),
            "peak_mem_allocated_bytes": _mem(torch, device),
        }
        progress(f"epoch {epoch + 1}/{cfg.epochs}: validation")
        val = _evaluate(torch, trainer, data.val_loader, spec, device, m)
        video["epochs"].append({"train": train, "val": val})
        log.info("epoch %d: loss %.3f, val top-1 %.2f %%", epoch, train["loss"], val["top1_pct"])
        top1 = "n/a" if val["top1_pct"] is None else f"{val['top1_pct']:.1f} %"
        progress(
            f"epoch {epoch + 1}/{cfg.epochs}: loss {train['loss']:.3f}, val top-1 {top1}, "
            f"{train['time_s']:.1f} s training",
            keep=True,
        )
        m.run_dir.path.joinpath(VIDEO_JSON).write_text(json.dumps(video, indent=1, default=str))
    if cfg.test and data.test_loader is not None:
        progress("test split")
        video["test"] = _evaluate(torch, trainer, data.test_loader, spec, device, m)
    if cfg.deploy:
        progress("deployment cost (inference latency and energy per clip)")
        video["deployment"] = _deployment(torch, trainer, cfg, spec, device, m)


def _deployment(torch, trainer, cfg, spec, device, m) -> dict[str, Any]:
    """The deployment cost: taken from `cfg.deploy_from` where that run's is reusable, else
    measured here."""
    from jouleprof.bench.video_deploy import deployment_cost, reusable_deployment

    if cfg.deploy_from:
        frames, size = trainer.cfg.clip
        clip = {"frames": frames, "size": size}
        dep, why = reusable_deployment(cfg.deploy_from, cfg.to_json(), clip, m.record.hardware)
        if dep is not None:
            m.record.notes.append(f"deployment cost not measured in this run: {why}")
            return dep
        m.record.notes.append(f"deployment cost measured in this run: --deploy-from: {why}")
    return deployment_cost(torch, trainer, cfg, spec, device, m)
