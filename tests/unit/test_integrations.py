"""Trainer and Lightning callbacks: a clear message without the package; a tiny run with it,
plain and with the recorder's excitation (its gaps land between the callbacks' phases)."""

from __future__ import annotations

import sys

import pytest

from jouleprof.clock import MonotonicClock
from jouleprof.timeline.excite import GAP_PHASE, ExciteConfig
from jouleprof.timeline.recorder import PhaseRecorder

EVERY_BOUNDARY = ExciteConfig(fraction=1.0, window_s=100.0, boundary_prob=1.0, max_gap_s=1e-3)


def test_missing_transformers_says_pip_install(monkeypatch):
    from jouleprof.integrations.hf_trainer import trainer_callback

    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match="pip install transformers"):
        trainer_callback(PhaseRecorder(MonotonicClock(), device="cpu"))


def test_missing_lightning_says_pip_install(monkeypatch):
    from jouleprof.integrations.lightning import lightning_callback

    monkeypatch.setitem(sys.modules, "lightning", None)
    monkeypatch.setitem(sys.modules, "lightning.pytorch", None)
    monkeypatch.setitem(sys.modules, "pytorch_lightning", None)
    with pytest.raises(ImportError, match="pip install lightning"):
        lightning_callback(PhaseRecorder(MonotonicClock(), device="cpu"))


def _phases_by_step(spans):
    out: dict[int, list[str]] = {}
    for s in sorted(spans, key=lambda s: s.t0_s):
        out.setdefault(s.step, []).append(s.phase)
    return out


def _with_gaps(names: list[str], excite: bool) -> list[str]:
    """The phases a step records, with the recorder's excitation gap before each but the first
    where every boundary is excited."""
    return [x for n in names for x in ((GAP_PHASE, n) if excite and n != names[0] else (n,))]


@pytest.mark.parametrize("excite", [False, True])
@pytest.mark.parametrize("hooks", [True, False])
def test_hf_trainer_callback_marks_steps(tmp_path, hooks, excite):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from jouleprof.integrations.hf_trainer import trainer_callback

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def forward(self, x, labels=None):
            out = self.lin(x).squeeze(-1)
            return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

    data = [{"x": torch.randn(4), "labels": torch.randn(())} for _ in range(8)]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=3,
        per_device_train_batch_size=2,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
    )
    rec = PhaseRecorder(MonotonicClock(), device="cpu", excite=EVERY_BOUNDARY if excite else None)
    trainer = transformers.Trainer(
        model=Tiny(), args=args, train_dataset=data, callbacks=[trainer_callback(rec, hooks=hooks)]
    )
    trainer.train()
    rec.close()
    steps = _phases_by_step(rec.sink.spans)
    assert sorted(steps) == [0, 1, 2]
    expect = ["forward", "backward", "optimizer"] if hooks else ["forward+backward", "optimizer"]
    for names in steps.values():
        assert names == _with_gaps(expect, excite)


def _lightning_fit(tmp_path, rec, prepare=None) -> None:
    """Three steps of a tiny Lightning model on CPU with jouleprof's callback on `rec`;
    `prepare(x)`, where given, runs first in training_step."""
    torch = pytest.importorskip("torch")
    try:
        import lightning.pytorch as pl
    except ImportError:
        pl = pytest.importorskip("pytorch_lightning")
    from jouleprof.integrations.lightning import lightning_callback

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            if prepare is not None:
                x = prepare(x)
            return torch.nn.functional.mse_loss(self.lin(x).squeeze(-1), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    ds = torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randn(8))
    trainer = pl.Trainer(
        max_steps=3,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[lightning_callback(rec)],
        default_root_dir=str(tmp_path),
    )
    trainer.fit(Tiny(), torch.utils.data.DataLoader(ds, batch_size=2))
    rec.close()


@pytest.mark.parametrize("excite", [False, True])
def test_lightning_callback_marks_steps(tmp_path, excite):
    rec = PhaseRecorder(MonotonicClock(), device="cpu", excite=EVERY_BOUNDARY if excite else None)
    _lightning_fit(tmp_path, rec)
    steps = _phases_by_step(rec.sink.spans)
    assert sorted(steps) == [0, 1, 2]
    for names in steps.values():
        assert names == _with_gaps(["forward", "backward", "optimizer"], excite)
    if excite:
        assert rec.exciter.n_gaps == 6


def test_replay_inside_a_lightning_training_step_repeats_a_nested_phase(tmp_path):
    """`rec.replay` called from training_step, on the recorder given to the callback: a phase
    nested in the callback's forward, run twice in the drawn steps (here every step)."""
    torch = pytest.importorskip("torch")
    from jouleprof.timeline.repeat import RepeatConfig

    rec = PhaseRecorder(
        MonotonicClock(), device="cpu", repeat=RepeatConfig(fraction=1.0, window_s=600.0)
    )
    _lightning_fit(tmp_path, rec, lambda x: rec.replay("augment", torch.flip, x, (0,)))
    steps = _phases_by_step(rec.sink.spans)
    assert sorted(steps) == [0, 1, 2]
    for names in steps.values():
        assert sorted(names) == sorted(
            ["forward", "forward/augment", "forward/augment", "backward", "optimizer"]
        )
    assert rec.repeater.to_json()["n_repeated_steps"] == 3
