"""Phases of a Hugging Face `Trainer` run, through a `TrainerCallback`.

`trainer.add_callback(trainer_callback(recorder))` marks, for every optimizer update:

* the step: `on_step_begin` … `on_step_end` (with gradient accumulation, one step holds every
  micro-batch of the update);
* "forward" and "backward" through the model's hooks (`auto_phases`, installed at
  `on_train_begin` on the model the Trainer passes), or, with `hooks=False`, one phase
  "forward+backward" from `on_step_begin` to `on_pre_optimizer_step`;
* "optimizer": `on_pre_optimizer_step` … `on_optimizer_step` (transformers ≥ 4.39 calls
  them around `optimizer.step()`; gradient clipping runs just before, outside any phase).
  On older versions those events never come and no optimizer phase is recorded.

The learning-rate scheduler, `zero_grad` and logging fall inside the step but outside any
phase. The callback never closes the recorder: whoever made it does, after `train()`.

Excitation (`timeline.excite`) needs nothing here: the callback and the hooks open their phases
on the recorder, so a `PhaseRecorder(..., excite=ExciteConfig(...))` puts its gaps where it
would in a hand-written loop: before "backward" (from the output's gradient hook, on autograd's
thread) and before "optimizer" (`on_pre_optimizer_step`); with `hooks=False` before "optimizer"
only.
"""

from __future__ import annotations

from typing import Any

from jouleprof.integrations.torch_hooks import auto_phases


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as e:
        raise ImportError(
            "the Hugging Face Trainer callback needs transformers: pip install transformers"
        ) from e
    return transformers


def trainer_callback(recorder: Any, *, hooks: bool = True) -> Any:
    """A `transformers.TrainerCallback` that marks a Trainer's steps and phases.

    Args:
        recorder: a `PhaseRecorder`.
        hooks: time forward and backward separately through model hooks; False: one
            "forward+backward" phase per step, from the callbacks alone.

    Raises:
        ImportError: transformers is not installed.
    """
    transformers = _transformers()

    class JouleprofCallback(transformers.TrainerCallback):
        """Marks steps and phases on a jouleprof `PhaseRecorder`."""

        def __init__(self) -> None:
            self.recorder = recorder
            self.hooks = hooks
            self._handle = None

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            if self.hooks and model is not None and self._handle is None:
                self._handle = auto_phases(model, None, self.recorder, step_on="none")

        def on_step_begin(self, args, state, control, **kwargs):
            if not self.recorder.in_step:
                self.recorder.begin_step()
            if not self.hooks:
                self.recorder.begin_phase("forward+backward")

        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            if self._handle is not None:
                self._handle.end_backward()
            else:
                self.recorder.end_phase("forward+backward")
            self.recorder.begin_phase("optimizer")

        def on_optimizer_step(self, args, state, control, **kwargs):
            self.recorder.end_phase("optimizer")

        def on_step_end(self, args, state, control, **kwargs):
            self.recorder.end_step()

        def on_train_end(self, args, state, control, **kwargs):
            if self._handle is not None:
                self._handle.remove()
                self._handle = None
            self.recorder.end_step()
            self.recorder.flush()

    return JouleprofCallback()
