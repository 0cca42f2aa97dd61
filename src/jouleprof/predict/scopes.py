"""Which module of a model is running: global forward hooks that keep a stack of module names.

Shared by the FakeTensor trace (features.py: each operator is charged to the innermost module)
and by the GPU collection (benchmarks/predict_collect.py: CUDA events at each module's entry and
exit), so both name a layer the same way: its path in `model.named_modules()` ("" is the root).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def module_names(model: Any) -> dict[int, tuple[str, str]]:
    """id(module) -> (path, class name) for every module of `model`."""
    return {id(m): (name, type(m).__name__) for name, m in model.named_modules()}


@contextmanager
def module_scopes(
    model: Any,
    on_enter: Callable[[str], None] | None = None,
    on_exit: Callable[[str], None] | None = None,
) -> Iterator[list[str]]:
    """Within the block, the yielded list is the stack of module paths now running.

    `on_enter(path)` / `on_exit(path)` run at each module call's start and end (after the stack
    was pushed / before it is popped). Modules outside `model` are ignored.
    """
    from torch.nn.modules import module as tm

    names = module_names(model)
    stack: list[str] = []

    def pre(mod, args):
        entry = names.get(id(mod))
        if entry is not None:
            stack.append(entry[0])
            if on_enter is not None:
                on_enter(entry[0])

    def post(mod, args, out):
        entry = names.get(id(mod))
        if entry is not None and stack and stack[-1] == entry[0]:
            if on_exit is not None:
                on_exit(entry[0])
            stack.pop()

    h1 = tm.register_module_forward_pre_hook(pre)
    h2 = tm.register_module_forward_hook(post, always_call=True)
    try:
        yield stack
    finally:
        h1.remove()
        h2.remove()
