"""Automatic phases for a plain PyTorch loop, without touching the loop.

`auto_phases(model, optimizer, recorder)` installs:

* **forward**: a forward pre-hook and hook on the top-level model (the hook with
  ``always_call=True``, so a forward that raises still closes its phase). Forwards run with
  grad disabled (evaluation, a no-grad teacher) are not recorded unless `include_no_grad`.
* **backward**: begins when autograd first computes a gradient for one of the model's outputs
  (a tensor hook on each output that requires grad; the first to fire wins), so the loss
  function's own tiny backward falls just before it. It ends when the whole backward pass is
  done: the output hook queues a callback on autograd's engine
  (``Variable._execution_engine.queue_callback``, what DDP and FSDP use), which runs after the
  last gradient has been accumulated. If that is unavailable, backward ends at the optimizer's
  step pre-hook (or at the next forward), which then includes whatever ran in between
  (gradient clipping, a loss.item()).
* **optimizer**: ``optimizer.register_step_pre_hook`` / ``register_step_post_hook``.
* **ema** (optional): the EMA object's update method is wrapped on the instance.
* **steps** (``step_on="optimizer"``): a step ends at the optimizer's post-hook (or after the
  EMA update, if one is given); the next step begins at the next forward or data fetch
  (`handle.data(loader)`). With gradient accumulation a step holds every micro-batch up to
  the optimizer step. A step whose optimizer step was skipped (AMP found inf) merges into the
  next. ``step_on="none"``: the hooks only mark phases; the caller opens steps.
* **layers** (optional): forward phases of named submodules, recorded as "forward/<name>".

`remove()` on the returned handle detaches everything.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

log = logging.getLogger(__name__)

STEP_ON = ("optimizer", "none")


def _tensors(obj: Any, out: list) -> list:
    """The tensors in a model's output (tensor, tuple/list, dict or ModelOutput), in order."""
    import torch

    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _tensors(o, out)
    elif isinstance(obj, dict):
        for o in obj.values():
            _tensors(o, out)
    return out


class AutoPhases:
    """The hooks `auto_phases` installed; `remove()` detaches them."""

    def __init__(
        self,
        model: Any,
        optimizer: Any,
        recorder: Any,
        *,
        ema: Any = None,
        ema_method: str | None = None,
        step_on: str = "optimizer",
        layers: Sequence[str] = (),
        include_no_grad: bool = False,
        names: dict[str, str] | None = None,
    ) -> None:
        import torch

        if step_on not in STEP_ON:
            raise ValueError(f"step_on must be one of {STEP_ON}, got {step_on!r}")
        self._torch = torch
        self.recorder = recorder
        self.step_on = step_on
        self.include_no_grad = include_no_grad
        n = {"forward": "forward", "backward": "backward", "optimizer": "optimizer", "ema": "ema"}
        n.update(names or {})
        self.names = n
        self._handles: list[Any] = []
        self._fwd_active: list[bool] = []
        self._in_backward = False
        self._stepped = False  # the optimizer ran in the open step
        self._opened_step = False
        self._ema_restore: tuple[Any, str, Any] | None = None
        self._removed = False
        self.n_backward_fallbacks = 0

        # Check everything before installing anything: a bad argument leaves no hook behind.
        subs = []
        for name in layers:
            try:
                subs.append((name, model.get_submodule(name)))
            except AttributeError as e:
                raise ValueError(f"layers: the model has no submodule {name!r} ({e})") from None
        ema_fn = self._ema_method(ema, ema_method) if ema is not None else None

        self._handles.append(model.register_forward_pre_hook(self._forward_pre))
        self._handles.append(model.register_forward_hook(self._forward_post, always_call=True))
        for name, sub in subs:
            self._handles.append(sub.register_forward_pre_hook(self._layer_pre(name)))
            self._handles.append(
                sub.register_forward_hook(self._layer_post(name), always_call=True)
            )
        if optimizer is not None:
            self._handles.append(optimizer.register_step_pre_hook(self._optimizer_pre))
            self._handles.append(optimizer.register_step_post_hook(self._optimizer_post))
        if ema_fn is not None:
            self._wrap_ema(ema, *ema_fn)

    # -- steps -------------------------------------------------------------------------------

    def _step_boundary(self) -> None:
        """Where a new step may begin (a forward or a data fetch)."""
        rec = self.recorder
        if self.step_on != "optimizer":
            return
        if rec.in_step and self._stepped:  # the EMA update never came: end the step here
            self._end_step()
        if not rec.in_step:
            rec.begin_step()
            self._opened_step = True

    def _end_step(self) -> None:
        self._stepped = False
        self._opened_step = False
        self.recorder.end_step()

    # -- forward -----------------------------------------------------------------------------

    def _forward_pre(self, module: Any, args: Any) -> None:
        active = self.include_no_grad or self._torch.is_grad_enabled()
        self._fwd_active.append(active)
        if not active:
            return
        if self._in_backward:  # the previous backward's end callback never ran
            self._end_backward()
            self.n_backward_fallbacks += 1
        self._step_boundary()
        self.recorder.begin_phase(self.names["forward"])

    def _forward_post(self, module: Any, args: Any, output: Any) -> None:
        active = self._fwd_active.pop() if self._fwd_active else False
        if not active:
            return
        self.recorder.end_phase(self.names["forward"])
        if output is None or not self._torch.is_grad_enabled():
            return
        for t in _tensors(output, []):
            if t.requires_grad and t.grad_fn is not None:
                t.register_hook(self._output_grad)

    def _layer_pre(self, name: str):
        def hook(module: Any, args: Any) -> None:
            if self._fwd_active and self._fwd_active[-1]:
                self.recorder.begin_phase(name)

        return hook

    def _layer_post(self, name: str):
        def hook(module: Any, args: Any, output: Any) -> None:
            if self._fwd_active and self._fwd_active[-1]:
                self.recorder.end_phase(name)

        return hook

    # -- backward ----------------------------------------------------------------------------

    def _output_grad(self, grad: Any) -> None:
        if self._in_backward or self._removed:
            return None
        self._in_backward = True
        self.recorder.begin_phase(self.names["backward"])
        try:
            self._torch.autograd.Variable._execution_engine.queue_callback(self._end_backward)
        except (AttributeError, RuntimeError) as e:
            # Without it, backward ends at the optimizer pre-hook or the next forward.
            if not self.n_backward_fallbacks:
                log.info("backward end falls back to the optimizer pre-hook: %s", e)
            self.n_backward_fallbacks += 1
        return None

    def _end_backward(self) -> None:
        if self._in_backward:
            self._in_backward = False
            self.recorder.end_phase(self.names["backward"])

    def end_backward(self) -> None:
        """Close an open backward phase now (for callbacks that know backward is over)."""
        self._end_backward()

    # -- optimizer and EMA -------------------------------------------------------------------

    def _optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._end_backward()
        if self.step_on == "optimizer" and not self.recorder.in_step:
            self.recorder.begin_step()
            self._opened_step = True
        self.recorder.begin_phase(self.names["optimizer"])

    def _optimizer_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.recorder.end_phase(self.names["optimizer"])
        if self.step_on == "optimizer":
            self._stepped = True
            if self._ema_restore is None:
                self._end_step()

    @staticmethod
    def _ema_method(ema: Any, method: str | None) -> tuple[str, Any]:
        candidates = [method] if method else ["update", "step"]
        for m in candidates:
            fn = getattr(ema, m, None)
            if callable(fn):
                return m, fn
        raise TypeError(
            f"ema: {type(ema).__name__} has no method {' or '.join(map(repr, candidates))} "
            "to wrap; pass ema_method=, or mark the update with recorder.phase('ema')"
        )

    def _wrap_ema(self, ema: Any, m: str, fn: Any) -> None:
        had_own = m in getattr(ema, "__dict__", {})
        phase = self.names["ema"]

        def update(*args: Any, **kwargs: Any) -> Any:
            self.recorder.begin_phase(phase)
            try:
                return fn(*args, **kwargs)
            finally:
                self.recorder.end_phase(phase)
                if self.step_on == "optimizer" and self._stepped and self.recorder.in_step:
                    self._end_step()

        setattr(ema, m, update)
        self._ema_restore = (ema, m, fn if had_own else None)

    # -- data --------------------------------------------------------------------------------

    def data(self, iterable: Iterable[Any], name: str = "data") -> Iterator[Any]:
        """Iterate `iterable`, recording each fetch as a phase; a fetch may begin a step."""
        rec = self.recorder
        it = iter(iterable)
        while True:
            self._step_boundary()
            rec.begin_phase(name)
            try:
                item = next(it)
            except StopIteration:
                rec.discard_phase()
                return
            except BaseException:
                rec.end_phase(name)
                raise
            rec.end_phase(name)
            yield item

    # -- removal -----------------------------------------------------------------------------

    def remove(self) -> None:
        """Detach every hook, restore the EMA method, and end what the hooks left open."""
        if self._removed:
            return
        self._removed = True
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if self._ema_restore is not None:
            ema, m, own = self._ema_restore
            if own is None:
                delattr(ema, m)
            else:
                setattr(ema, m, own)
            self._ema_restore = None
        self._end_backward()
        if self.step_on == "optimizer" and self.recorder.in_step:
            self.recorder.end_step()

    def __enter__(self) -> AutoPhases:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def auto_phases(
    model: Any,
    optimizer: Any,
    recorder: Any,
    *,
    ema: Any = None,
    ema_method: str | None = None,
    step_on: str = "optimizer",
    layers: Sequence[str] = (),
    include_no_grad: bool = False,
    names: dict[str, str] | None = None,
) -> AutoPhases:
    """Record forward, backward, optimizer (and EMA) phases of a loop through hooks.

    Args:
        model: the top-level `nn.Module` trained.
        optimizer: its `torch.optim.Optimizer`, or None to record no optimizer phase.
        recorder: a `PhaseRecorder` (anything with begin_/end_step and begin_/end_phase).
        ema: an object whose update method (`ema_method`, default "update" or "step") is
            wrapped so that each call is the phase "ema".
        step_on: "optimizer" (steps end at the optimizer step, or after EMA) or "none".
        layers: names of submodules (as in `named_modules()`) whose forward is a phase.
        include_no_grad: also record forwards run with grad disabled.
        names: other names for the phases, e.g. {"optimizer": "adamw"}.

    Returns:
        A handle with `.remove()` and `.data(iterable)` (data fetches as phases).
    """
    return AutoPhases(
        model,
        optimizer,
        recorder,
        ema=ema,
        ema_method=ema_method,
        step_on=step_on,
        layers=layers,
        include_no_grad=include_no_grad,
        names=names,
    )
