"""The V-JEPA2 loader on a CUDA machine: batches assembled in pinned memory feed the step."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import Dataset  # noqa: E402

from jouleprof.workloads.vjepa2 import get_preset  # noqa: E402
from jouleprof.workloads.vjepa2.collate import make_loader  # noqa: E402
from jouleprof.workloads.vjepa2.step import VJepa2Trainer  # noqa: E402

pytestmark = pytest.mark.gpu


class Clips(Dataset):
    def __init__(self, config, n=12):
        self.shape = (3, config.num_frames, config.crop_px, config.crop_px)
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        return torch.randn(self.shape, generator=torch.Generator().manual_seed(index))


@pytest.mark.parametrize("workers", [0, 2])
def test_pinned_batches_train(workers):
    config = get_preset("tiny", batch_size=4)
    loader = make_loader(config, Clips(config), device="cuda", num_workers=workers)
    assert loader.pin_memory
    it = iter(loader)
    try:
        batch = next(it)
        assert batch.clips.is_pinned()
        assert all(t.is_pinned() for t in batch.context + batch.target)
        trainer = VJepa2Trainer(config, "cuda")
        losses = [trainer.train_step(it).loss for _ in range(3)]
        assert all(torch.isfinite(loss) for loss in losses)
    finally:
        it.close()
