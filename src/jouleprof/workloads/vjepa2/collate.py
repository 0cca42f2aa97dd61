"""Batches for the V-JEPA2 step: stacked clips plus the mask indices, built on the CPU.

The DataLoader's workers decode single clips, and a thread of the training process stacks B of
them, draws the batch's masks (as the reference collator does, so the GPU step receives ready
index tensors and spends no time on them) and, for a CUDA run, writes the batch straight into
pinned memory. See `ClipBatchLoader` for why the batch is not assembled in one worker.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler, Sampler, get_worker_info

from jouleprof.workloads.vjepa2.config import VJepa2Config
from jouleprof.workloads.vjepa2.masks import MultiBlock3dMasks

logger = logging.getLogger(__name__)


@dataclass
class VJepa2Batch:
    """One micro-batch: clips and, per mask set, the context and target token indices."""

    clips: torch.Tensor
    """float32 (B, 3, T, H, W), normalized."""
    context: list[torch.Tensor]
    """Per mask set, int64 (B, K_context) token indices the context encoder keeps."""
    target: list[torch.Tensor]
    """Per mask set, int64 (B, K_target) token indices the predictor predicts."""

    @property
    def batch_size(self) -> int:
        return int(self.clips.shape[0])

    def pin_memory(self) -> VJepa2Batch:
        """Page-locked copy, called by the DataLoader's pin-memory thread."""
        return VJepa2Batch(
            self.clips.pin_memory(),
            [c.pin_memory() for c in self.context],
            [t.pin_memory() for t in self.target],
        )

    def to(self, device: torch.device | str, non_blocking: bool = False) -> VJepa2Batch:
        """The batch on `device`; asynchronous from pinned memory when `non_blocking`."""
        return VJepa2Batch(
            self.clips.to(device, non_blocking=non_blocking),
            [c.to(device, non_blocking=non_blocking) for c in self.context],
            [t.to(device, non_blocking=non_blocking) for t in self.target],
        )


class VJepa2Collator:
    """Stacks clips (items may be `clip` or `(clip, label)`) and draws the masks of the batch.

    Args:
        config: Gives the token grid and the mask specs.
        seed: Mixed with the worker id, so each worker draws its own masks reproducibly (in the
            training process, as `ClipBatchLoader` calls it, the id is -1: one mask stream,
            whatever the number of workers).
        pin_memory: Stack the clips straight into page-locked memory (CUDA runs), and pin the
            index tensors: one copy of the clips rather than a stack then a pinned copy.
    """

    def __init__(
        self, config: VJepa2Config, seed: int | None = None, *, pin_memory: bool = False
    ) -> None:
        self.masks = MultiBlock3dMasks(config.grid, config.masks)
        self.seed = config.seed if seed is None else seed
        self.pin_memory = pin_memory
        self._rng: np.random.Generator | None = None
        self._worker = -2

    def _generator(self) -> np.random.Generator:
        info = get_worker_info()
        worker = -1 if info is None else info.id
        if self._rng is None or worker != self._worker:
            self._rng = np.random.default_rng([self.seed, worker + 1])
            self._worker = worker
        return self._rng

    def __call__(self, items: Sequence[torch.Tensor | tuple]) -> VJepa2Batch:
        clips = [i[0] if isinstance(i, tuple | list) else i for i in items]
        if self.pin_memory:
            first = clips[0]
            out = torch.empty((len(clips), *first.shape), dtype=first.dtype, pin_memory=True)
            stacked = torch.stack(clips, out=out)
        else:
            stacked = torch.stack(clips)
        sets = self.masks(len(items), self._generator())
        context = [torch.from_numpy(s.context) for s in sets]
        target = [torch.from_numpy(s.target) for s in sets]
        if self.pin_memory:
            context = [c.pin_memory() for c in context]
            target = [t.pin_memory() for t in target]
        return VJepa2Batch(stacked, context, target)


class InfiniteSampler(Sampler[int]):
    """Shuffled indices, epoch after epoch, forever: one DataLoader iterator serves a whole run,
    so persistent workers never restart mid-run."""

    def __init__(self, size: int, seed: int = 0) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size, self.seed = size, seed

    def __iter__(self) -> Iterator[int]:
        rng = np.random.default_rng(self.seed)
        while True:
            yield from rng.permutation(self.size).tolist()


def build_dataset(
    config: VJepa2Config, source: object, *, cache_dir: str | Path | None = None
) -> Dataset:
    """A clip Dataset from `source`: a Dataset (used as is), 'fake' (FakeVideo with default
    synthesis), a folder or .csv list, or a sequence of video paths."""
    if isinstance(source, Dataset):
        return source
    from jouleprof.data.clipdataset import VideoClipDataset  # PyAV only when video is used

    common = dict(
        num_frames=config.num_frames,
        frame_stride=config.frame_stride,
        crop_px=config.crop_px,
        seed=config.seed,
    )
    if source == "fake":
        from jouleprof.data.fakevideo import FakeVideo, FakeVideoSpec

        # Frames a bit larger than the crop and a bit longer than the sampled span, so the
        # random crop and the random start both have room, as with real clips.
        side = 2 * ((config.crop_px * 8 // 7 + 1) // 2)
        span = (config.num_frames - 1) * config.frame_stride + 1
        spec = FakeVideoSpec(
            frames_per_clip=span + 16, height_px=side, width_px=side, seed=config.seed
        )
        return FakeVideo(spec, cache_dir=cache_dir, **common)
    if isinstance(source, str | Path):
        from jouleprof.data.clips import find_clips

        entries = find_clips(source)
        labels = [e.label for e in entries]
        return VideoClipDataset(
            [e.path for e in entries],
            labels=labels if any(label is not None for label in labels) else None,
            **common,
        )
    if isinstance(source, Sequence):
        return VideoClipDataset(list(source), **common)
    raise TypeError(
        f"source must be a Dataset, 'fake', a folder, a .csv list or a list of paths; "
        f"got {type(source).__name__}"
    )


def _as_is(item: object) -> object:
    """The clip loader's collate_fn: single items pass through untouched (module-level, so a
    worker started by spawn can unpickle it)."""
    return item


class _Failure:
    """An exception raised in the assembly thread, carried to the consumer."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


PREFETCH_BATCHES = 4
"""Batches' worth of clips in flight in the workers by default, all workers together (not per
worker: with PyTorch's whole-batch loading, 2 batches a worker were 1,536 clips at batch 64 with
12 workers, each crossing to this process in shared memory through a file descriptor). With two
more batches ready in the assembly queue, about six batches stand between a stall and the GPU."""


def _open_files_budget() -> int:
    """Half of this process's soft open-files limit (4096 where it cannot be read)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 4096
    return 4096 if soft == resource.RLIM_INFINITY else max(soft // 2, 16)


_END = object()  # the clip stream ran out (finite loaders only)
_POLL_S = 0.1  # how often a blocked assembly thread looks at its stop flag
_JOIN_S = 10.0  # how long shutting down waits for the assembly thread


class ClipBatchLoader:
    """An iterable of `VJepa2Batch`: a DataLoader over single clips, batched in this process.

    Why not `DataLoader(batch_size=B)`: it hands a whole batch to ONE worker, so the first batch
    takes B clip decodes while the other workers decode batches 2, 3... In the H200 study
    (benchmarks/results/study_vith, 12 workers) the warm-up's first step waited for it: warm-up
    4–6 s at batch ≤ 16 but 29 s at batch 64 and 67 s at batch 128. Here the sampler's order is
    dealt out one clip per task, round robin, so batch k's clips are decoded by all the workers
    at once and the first batch of B arrives after about ceil(B / W) clip decodes; later
    batches arrive at the same rate as before (the same workers do the same work).

    Measured on a 2-core CPU box (times from creating the iterator, worker start included):
    - a Dataset sleeping 50 ms per clip (so 8 workers need no cores), B=64, W=8: first batch at
      3.49 s with the whole-batch loader, at 0.61 s here (ideal 8 × 50 ms = 0.40 s), then one
      every 0.40 s;
    - FakeVideo clips of the vit_huge preset (16 frames, 224², 50–70 ms each on one core), B=16,
      W=2, three runs: first batch at 1.84–2.86 s before, 0.81–1.54 s here.
    Shutting down is quicker too: a worker finishes its current task before it exits, and the
    DataLoader waits up to 5 s for each worker before killing it; a task is now one clip, not a
    batch. Shutdown measured: 3.28 s before, 0.11 s here (sleeping Dataset); 1.0–1.7 s before,
    0.06–0.13 s here (FakeVideo). The study's batch-64 and batch-128 baseline and e2e cells
    spent about 5 s in teardown, which fits that 5 s wait.

    Assembling costs the training process what the workers did before. At B=64 (617 MB of
    float32 clips), on one core here: receiving the 64 clips from the workers 35–45 ms of CPU;
    torch.stack 170–230 ms into a buffer already mapped, 0.4–2.1 s into a fresh allocation
    (page faults); drawing the masks 7–19 ms. The vit_huge step at batch 64 takes 0.96 s on
    the H200, so this must stay off the thread that launches the GPU work: with workers, a
    background thread assembles batches (one intra-op thread, like the DataLoader's pin-memory
    thread) and keeps `ready_batches` of them ready, and the training thread only takes one from
    a queue. On CUDA the clips are stacked straight into pinned memory from torch's caching host
    allocator, which hands the blocks of consumed batches back (no new page-locking, no page
    faults once a few batches have gone through). The old pin-memory thread instead pinned every
    batch the workers finished, up to 2 × W batches (15 GB at batch 64 with 12 workers), each a
    new page-locked allocation while the warm-up replayed its first batch and consumed none; in
    the study's batch-64 cell the warm-up steps took 2.0–4.5 s, against 0.96 s later, while those
    batches came in (not yet shown to be the cause: a GPU run should tell).

    With `num_workers=0` the clips are decoded and assembled in the calling thread, as before.

    Determinism: the clip order is the sampler's, as before (batch k holds sampler positions
    kB..kB+B-1). Clip i is decoded by worker i mod W (the DataLoader deals tasks round robin),
    whose augmentation stream is seeded as before, so a run repeats given the seed and W. The
    masks come from one stream in this process (seed, id -1), so they are the same for every W
    and equal to the masks of a `num_workers=0` run; with the whole-batch loader each worker
    drew masks from its own stream.

    Args:
        dataset: Items are clips or (clip, label).
        collator: Makes a batch of B items.
        batch_size: B.
        sampler: Order of the clips (e.g. `InfiniteSampler`).
        num_workers: Decoding processes; 0 decodes in the calling thread.
        prefetch_batches: Batches' worth of clips the workers decode ahead, all workers
            together (default `PREFETCH_BATCHES`; capped by the open-files limit). The
            whole-batch loader held 2 batches per worker, which let the first study's 6 s
            measured segments at batch 64 run on batches decoded during its long warm-up;
            with a short warm-up a loader slower than the GPU shows as data_wait_pct.
        ready_batches: Assembled batches kept ready by the assembly thread.
        pin_device: The CUDA device whose pinned memory the collator allocates (None: no pin).
        generator: Seeds the workers (and a finite loader's shuffle).
    """

    def __init__(
        self,
        dataset: Dataset,
        collator: VJepa2Collator,
        batch_size: int,
        *,
        sampler: Sampler[int],
        num_workers: int = 0,
        prefetch_batches: int | None = None,
        ready_batches: int = 2,
        pin_device: torch.device | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        if ready_batches < 1:
            raise ValueError(f"ready_batches must be >= 1, got {ready_batches}")
        self.dataset = dataset
        self.collator = collator
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.ready_batches = ready_batches
        self.pin_device = pin_device
        self._current: weakref.ref[BatchIterator] | None = None
        extra: dict[str, object] = {}
        if num_workers > 0:
            depth = PREFETCH_BATCHES if prefetch_batches is None else prefetch_batches
            if depth < 1:
                raise ValueError(f"prefetch_batches must be >= 1, got {prefetch_batches}")
            per_worker = max(2, math.ceil(depth * batch_size / num_workers))
            cap = max(2, _open_files_budget() // num_workers)
            if per_worker > cap:
                logger.warning(
                    "loader: %d clips in flight per worker would pass the open-files limit "
                    "(each clip crosses in shared memory through a file descriptor); using %d",
                    per_worker,
                    cap,
                )
                per_worker = cap
            extra = {"prefetch_factor": per_worker, "persistent_workers": True}
        self.clip_loader = DataLoader(
            dataset,
            batch_size=None,  # one clip per task
            sampler=sampler,
            num_workers=num_workers,
            collate_fn=_as_is,
            pin_memory=False,  # the collator pins the stacked batch
            generator=generator,
            **extra,
        )

    @property
    def pin_memory(self) -> bool:
        """Whether batches come in page-locked memory."""
        return self.pin_device is not None

    def __len__(self) -> int:
        """Batches in one pass (finite samplers only; the last partial batch is dropped)."""
        return len(self.clip_loader) // self.batch_size

    def __iter__(self) -> BatchIterator:
        # The persistent workers serve one pass at a time: a new pass ends the previous one's
        # assembly thread, which would otherwise read from the same worker iterator.
        previous = self._current() if self._current is not None else None
        if previous is not None:
            previous._stop_thread()
        it = BatchIterator(self)
        self._current = weakref.ref(it)
        return it


def _take_batch(
    clips: Iterator, collate: VJepa2Collator, size: int, stop: threading.Event | None = None
) -> VJepa2Batch | None:
    """The next `size` clips, collated; None when fewer are left (or when stopped)."""
    items = []
    for item in clips:
        items.append(item)
        if len(items) == size or (stop is not None and stop.is_set()):
            break
    if len(items) < size:
        return None
    return collate(items)


def _put(out: queue.Queue, item: object, stop: threading.Event) -> bool:
    while not stop.is_set():
        try:
            out.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _assemble(
    clips: Iterator,
    collate: VJepa2Collator,
    size: int,
    out: queue.Queue,
    stop: threading.Event,
    cuda_index: int | None,
) -> None:
    """The assembly thread: batches into `out` until the clips run out or `stop` is set.

    Holds no reference to its `BatchIterator`, so dropping the iterator stops the thread (its
    __del__ sets `stop`), which releases the clip iterator and so the workers."""
    try:
        # One intra-op thread, as in the DataLoader's pin-memory thread (the setting is per
        # thread): the stack must not take every core from the workers and the training thread.
        torch.set_num_threads(1)
        if cuda_index is not None:
            torch.cuda.set_device(cuda_index)
        while not stop.is_set():
            batch = _take_batch(clips, collate, size, stop)
            if stop.is_set():
                return
            if not _put(out, _END if batch is None else batch, stop) or batch is None:
                return
    except BaseException as e:  # carried to the consumer, which raises it
        _put(out, _Failure(e), stop)


class BatchIterator(Iterator[VJepa2Batch]):
    """One pass over a `ClipBatchLoader` (endless with an infinite sampler).

    Creating it starts the workers first (forked before anything here touches CUDA), then the
    assembly thread. `close()` (alias `_shutdown_workers`, the name the DataLoader's iterator
    uses) stops both; dropping the iterator does the same.
    """

    def __init__(self, loader: ClipBatchLoader) -> None:
        self.batch_size = loader.batch_size
        self._collate = loader.collator
        self._done = False
        self._thread: threading.Thread | None = None
        self._clip_loader = loader.clip_loader
        self._clips = iter(loader.clip_loader)  # workers start here
        if loader.num_workers == 0:
            return
        cuda_index = None
        if loader.pin_device is not None and loader.pin_device.type == "cuda":
            index = loader.pin_device.index
            cuda_index = torch.cuda.current_device() if index is None else index
        self._queue: queue.Queue = queue.Queue(maxsize=loader.ready_batches)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=_assemble,
            args=(
                self._clips,
                self._collate,
                self.batch_size,
                self._queue,
                self._stop,
                cuda_index,
            ),
            name="vjepa2-batches",
            daemon=True,
        )
        self._thread.start()

    def __next__(self) -> VJepa2Batch:
        if self._done:
            raise StopIteration
        if self._thread is None:
            batch = _take_batch(self._clips, self._collate, self.batch_size)
        else:
            item = self._queue.get()
            if isinstance(item, _Failure):
                self._done = True
                raise item.exc
            batch = None if item is _END else item
        if batch is None:
            self._done = True
            raise StopIteration
        return batch

    def _stop_thread(self) -> None:
        self._done = True
        if self._thread is not None:
            self._stop.set()
            while True:  # unblock a put
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break
            # It may be waiting for the next clip: at most about one clip decode.
            self._thread.join(timeout=_JOIN_S)

    def close(self) -> None:
        """Stops the assembly thread and the workers (safe to call twice)."""
        self._stop_thread()
        shutdown = getattr(self._clips, "_shutdown_workers", None)  # multi-process only
        if shutdown is not None:
            shutdown()
            if getattr(self._clip_loader, "_iterator", None) is self._clips:
                self._clip_loader._iterator = None  # a later pass starts new workers

    _shutdown_workers = close

    def __del__(self) -> None:
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()


def make_loader(
    config: VJepa2Config,
    source: object,
    *,
    device: torch.device | str | None = None,
    cache_dir: str | Path | None = None,
    infinite: bool = True,
    num_workers: int | None = None,
    prefetch_batches: int | None = None,
) -> ClipBatchLoader:
    """An iterable of `VJepa2Batch` for training (see `ClipBatchLoader`).

    Args:
        config: Batch size, workers, seed, clip shape and masks.
        source: See `build_dataset`.
        device: Where batches go; memory is pinned when it is a CUDA device.
        cache_dir: FakeVideo's cache folder.
        infinite: Iterate forever (training) rather than one shuffled pass.
        num_workers: Overrides `config.num_workers`.
        prefetch_batches: See `ClipBatchLoader`.
    """
    dataset = build_dataset(config, source, cache_dir=cache_dir)
    workers = config.num_workers if num_workers is None else num_workers
    pin = device is not None and torch.device(device).type == "cuda"
    if len(dataset) < config.batch_size:
        logger.warning(
            "dataset has %d clips, fewer than batch_size %d", len(dataset), config.batch_size
        )
    generator = torch.Generator().manual_seed(config.seed)
    sampler: Sampler[int] = (
        InfiniteSampler(len(dataset), config.seed)
        if infinite
        else RandomSampler(dataset, generator=generator)
    )
    return ClipBatchLoader(
        dataset,
        VJepa2Collator(config, pin_memory=pin),
        config.batch_size,
        sampler=sampler,
        num_workers=workers,
        prefetch_batches=prefetch_batches,
        pin_device=torch.device(device) if pin else None,
        generator=generator,
    )
