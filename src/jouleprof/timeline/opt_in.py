"""The form of an opt-in setting such as `profile(excite=...)` or `profile(repeat=...)`."""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def opt_in(value: Any, cls: type[T], name: str) -> T | None:
    """`value` as given for the opt-in setting `name`: None or False (off), True (`cls()`, the
    defaults) or an instance of `cls` (itself).

    Raises:
        ValueError: anything else, naming the setting and the forms it takes.
    """
    if value is None or value is False:
        return None
    if value is True:
        return cls()
    if not isinstance(value, cls):
        raise ValueError(
            f"{name} must be None, True or a jouleprof.{cls.__name__}, got {type(value).__name__}"
        )
    return value
