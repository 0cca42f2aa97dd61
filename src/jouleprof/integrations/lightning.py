"""Phases of a PyTorch Lightning run, through a `Callback`.

`Trainer(callbacks=[lightning_callback(recorder)])` marks, for every training batch:

* the step: `on_train_batch_start` … `on_train_batch_end`;
* "forward": from the batch's start to `on_before_backward` (training_step and the loss);
* "backward": `on_before_backward` … `on_after_backward`;
* "optimizer": `on_before_optimizer_step` (after the closure ran forward and backward;
  gradient clipping follows inside the phase) to the optimizer's own step post-hook, which
  fires once the parameters are updated.

Why not the optimizer's pre-hook: under automatic optimization Lightning calls
`optimizer.step(closure)` and the closure runs forward and backward *inside* it, so the
pre-hook fires before the forward. With gradient accumulation, batches that do not step the
optimizer are steps without an optimizer phase. The callback never closes the recorder.

Excitation (`timeline.excite`) needs nothing here: the callback opens its phases on the
recorder, so a `PhaseRecorder(..., excite=ExciteConfig(...))` puts its gaps where it would in a
hand-written loop, before "backward" (in `on_before_backward`) and before "optimizer" (in
`on_before_optimizer_step`, after the closure's backward).
"""

from __future__ import annotations

from typing import Any


def _lightning() -> Any:
    try:
        import lightning.pytorch as pl
    except ImportError:
        try:
            import pytorch_lightning as pl
        except ImportError as e:
            raise ImportError(
                "the Lightning callback needs PyTorch Lightning: pip install lightning"
            ) from e
    return pl


def _torch_optimizer(opt: Any) -> Any:
    # LightningOptimizer wraps the torch optimizer.
    return getattr(opt, "optimizer", None) or getattr(opt, "_optimizer", None) or opt


def lightning_callback(recorder: Any) -> Any:
    """A Lightning `Callback` that marks steps and phases on a jouleprof `PhaseRecorder`.

    Raises:
        ImportError: neither `lightning` nor `pytorch_lightning` is installed.
    """
    pl = _lightning()

    class JouleprofLightningCallback(pl.Callback):
        """Marks steps and phases on a jouleprof `PhaseRecorder`."""

        def __init__(self) -> None:
            super().__init__()
            self.recorder = recorder
            self._handles: list[Any] = []

        def on_train_start(self, trainer, pl_module):
            for opt in getattr(trainer, "optimizers", []) or []:
                post = _torch_optimizer(opt).register_step_post_hook(self._optimizer_done)
                self._handles.append(post)

        def _optimizer_done(self, optimizer, args, kwargs):
            self.recorder.end_phase("optimizer")

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx, *args):
            if self.recorder.in_step:
                self.recorder.end_step()
            self.recorder.begin_step()
            self.recorder.begin_phase("forward")

        def on_before_backward(self, trainer, pl_module, loss):
            self.recorder.end_phase("forward")
            self.recorder.begin_phase("backward")

        def on_after_backward(self, trainer, pl_module):
            self.recorder.end_phase("backward")

        def on_before_optimizer_step(self, trainer, pl_module, optimizer, *args):
            self.recorder.begin_phase("optimizer")

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, *args):
            self.recorder.end_step()

        def _detach(self) -> None:
            for h in self._handles:
                h.remove()
            self._handles.clear()
            self.recorder.end_step()
            self.recorder.flush()

        def on_train_end(self, trainer, pl_module):
            self._detach()

        def on_exception(self, trainer, pl_module, exception):
            self._detach()

    return JouleprofLightningCallback()
