"""The V-JEPA2 loader: single clips decoded by the workers, batched in the training process."""

from __future__ import annotations

import gc
import time

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from jouleprof.workloads.vjepa2 import get_preset
from jouleprof.workloads.vjepa2.collate import (
    ClipBatchLoader,
    InfiniteSampler,
    VJepa2Batch,
    VJepa2Collator,
    make_loader,
)

# Up to 4 workers, more than a small CI machine's cores: they mostly sleep.
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def tiny(**overrides):
    return get_preset("tiny", **overrides)


class Tagged(Dataset):
    """Clip i is filled with i; its first element is overwritten with the id of the worker
    that made it (-1 in the main process). Optional delay per clip and a failing index."""

    def __init__(self, config, n=12, delay_s=0.0, fail_at=None):
        self.shape = (3, config.num_frames, config.crop_px, config.crop_px)
        self.n, self.delay_s, self.fail_at = n, delay_s, fail_at

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        if index == self.fail_at:
            raise ValueError(f"clip {index} is broken")
        if self.delay_s:
            time.sleep(self.delay_s)
        clip = torch.full(self.shape, float(index))
        info = get_worker_info()
        clip.view(-1)[0] = -1.0 if info is None else float(info.id)
        return clip, index  # a label, which the collator drops


def clip_index(batch: VJepa2Batch) -> list[int]:
    return [int(c.view(-1)[1]) for c in batch.clips]


def worker_of(batch: VJepa2Batch) -> list[int]:
    return [int(c.view(-1)[0]) for c in batch.clips]


def take(loader, n):
    it = iter(loader)
    try:
        return [next(it) for _ in range(n)]
    finally:
        it.close()


def check_structure(batch: VJepa2Batch, config) -> None:
    b = config.batch_size
    assert isinstance(batch, VJepa2Batch) and batch.batch_size == b
    assert batch.clips.shape == (b, 3, config.num_frames, config.crop_px, config.crop_px)
    assert batch.clips.dtype == torch.float32
    assert len(batch.context) == len(batch.target) == len(config.masks)
    for context, target in zip(batch.context, batch.target, strict=True):
        assert context.dtype == target.dtype == torch.int64
        assert context.shape[0] == target.shape[0] == b
        for row_c, row_t in zip(context.tolist(), target.tolist(), strict=True):
            assert not set(row_c) & set(row_t)  # context and target are disjoint
            assert all(0 <= i < config.num_tokens for i in row_c + row_t)


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_keep_shapes_order_and_mask_structure(workers):
    config = tiny(batch_size=4)
    dataset = Tagged(config)
    batches = take(make_loader(config, dataset, device="cpu", num_workers=workers), 5)
    stream = iter(InfiniteSampler(len(dataset), config.seed))
    expected = [[next(stream) for _ in range(4)] for _ in range(5)]  # spans two epochs
    for batch, indices in zip(batches, expected, strict=True):
        check_structure(batch, config)
        assert clip_index(batch) == indices
        assert set(worker_of(batch)) <= ({-1} if workers == 0 else set(range(workers)))


def test_masks_do_not_depend_on_the_number_of_workers():
    config = tiny(batch_size=4)
    runs = [
        take(make_loader(config, Tagged(config), device="cpu", num_workers=w), 3) for w in (0, 2)
    ]
    for zero, two in zip(*runs, strict=True):
        for a, b in zip(zero.context + zero.target, two.context + two.target, strict=True):
            assert torch.equal(a, b)


def test_zero_workers_gives_what_the_whole_batch_dataloader_gave():
    """num_workers=0: clips, order and masks identical to DataLoader(batch_size=B) with the
    collator, the loader used before batches were assembled from single clips."""
    config = tiny(batch_size=4)
    dataset = Tagged(config)
    old = DataLoader(
        dataset,
        batch_size=4,
        sampler=InfiniteSampler(len(dataset), config.seed),
        drop_last=True,
        collate_fn=VJepa2Collator(config),
        generator=torch.Generator().manual_seed(config.seed),
    )
    old_it = iter(old)
    for new in take(make_loader(config, dataset, device="cpu", num_workers=0), 4):
        ref = next(old_it)
        assert torch.equal(new.clips, ref.clips)
        for a, b in zip(new.context + new.target, ref.context + ref.target, strict=True):
            assert torch.equal(a, b)


def test_first_batch_is_decoded_by_several_workers():
    """The whole-batch DataLoader gives batch 0 to worker 0 alone; here its clips are dealt
    out to all the workers, so the first batch comes after ceil(B/W) clip decodes."""
    config = tiny(batch_size=6)
    (first,) = take(make_loader(config, Tagged(config, n=24), device="cpu", num_workers=3), 1)
    workers = worker_of(first)
    assert sorted(set(workers)) == [0, 1, 2]
    assert all(workers.count(w) == 2 for w in range(3))


def test_first_batch_arrives_after_a_share_of_the_decodes():
    # 8 clips of 0.5 s over 4 workers: about 1 s (plus worker start), against 4 s when one
    # worker decodes the batch. The bound leaves room for a slow machine.
    config = tiny(batch_size=8)
    t0 = time.perf_counter()
    take(make_loader(config, Tagged(config, n=16, delay_s=0.5), device="cpu", num_workers=4), 1)
    assert time.perf_counter() - t0 < 3.0


def test_finite_passes_drop_the_partial_batch():
    config = tiny(batch_size=4)
    for workers in (0, 2):
        loader = make_loader(
            config, Tagged(config, n=10), device="cpu", num_workers=workers, infinite=False
        )
        assert len(loader) == 2
        for _ in range(2):  # a second pass reuses the persistent workers
            batches = list(loader)
            assert len(batches) == 2
            seen = [i for b in batches for i in clip_index(b)]
            assert len(set(seen)) == 8 and set(seen) <= set(range(10))
        it = iter(loader)
        next(it)
        it.close()  # workers shut down: the next pass starts new ones
        assert len(list(loader)) == 2


def test_a_worker_error_reaches_the_training_thread():
    config = tiny(batch_size=4)
    dataset = Tagged(config, n=8, fail_at=int(next(iter(InfiniteSampler(8, config.seed)))))
    it = iter(make_loader(config, dataset, device="cpu", num_workers=2))
    with pytest.raises(ValueError, match="is broken"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)
    it.close()


def test_close_stops_the_thread_and_the_workers_quickly():
    config = tiny(batch_size=8)
    dataset = Tagged(config, n=16, delay_s=0.05)
    it = iter(make_loader(config, dataset, device="cpu", num_workers=2))
    next(it)
    thread, workers = it._thread, list(it._clips._workers)
    assert thread.is_alive() and all(w.is_alive() for w in workers)
    t0 = time.perf_counter()
    it._shutdown_workers()  # the name the benchmark session calls
    assert time.perf_counter() - t0 < 3.0
    assert not thread.is_alive() and not any(w.is_alive() for w in workers)
    it.close()  # twice is harmless
    with pytest.raises(StopIteration):
        next(it)


def test_dropping_the_iterator_stops_its_thread():
    config = tiny(batch_size=4)
    it = iter(make_loader(config, Tagged(config), device="cpu", num_workers=2))
    next(it)
    thread = it._thread
    del it
    gc.collect()
    thread.join(timeout=5.0)
    assert not thread.is_alive()


def test_loader_checks_its_arguments_and_trains():
    config = tiny(batch_size=2)
    dataset = Tagged(config)
    with pytest.raises(ValueError, match="batch_size"):
        ClipBatchLoader(dataset, VJepa2Collator(config), 0, sampler=InfiniteSampler(3))
    with pytest.raises(ValueError, match="ready_batches"):
        ClipBatchLoader(
            dataset, VJepa2Collator(config), 2, sampler=InfiniteSampler(3), ready_batches=0
        )
    loader = make_loader(config, dataset, device="cpu", num_workers=2)
    # Default depth: PREFETCH_BATCHES batches over all workers: 4 × 2 clips / 2 workers.
    assert not loader.pin_memory and loader.clip_loader.prefetch_factor == 4
    from jouleprof.timeline.markers import NullRecorder
    from jouleprof.workloads.vjepa2.loop import run

    summary = run(config, NullRecorder(), steps=2, data=loader, device="cpu")
    assert summary.steps == 2 and np.isfinite(summary.final_loss)


def test_clips_in_flight_stay_under_the_open_files_limit(monkeypatch):
    import resource

    from jouleprof.workloads.vjepa2 import collate

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert collate._open_files_budget() == (4096 if soft == resource.RLIM_INFINITY else soft // 2)
    config = tiny(batch_size=64)
    dataset = Tagged(config)
    monkeypatch.setattr(collate, "_open_files_budget", lambda: 100)
    loader = ClipBatchLoader(
        dataset, VJepa2Collator(config), 64, sampler=InfiniteSampler(3), num_workers=4
    )
    assert loader.clip_loader.prefetch_factor == 25  # 4 × 64 / 4 = 64 wanted, 100 / 4 allowed
