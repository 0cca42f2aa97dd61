"""jouleprof: measure, attribute and predict the GPU energy, time and memory of deep learning.

Importing this package probes no hardware and imports neither torch nor pynvml; the public
entry points below import what they need when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Imported at once (it is light): the submodule jouleprof.profile would otherwise shadow the
# class of the same name as an attribute of the package.
from jouleprof.profile import profile  # noqa: E402

__all__ = [
    "__version__",
    "profile",
    "measure",
    "Sampler",
    "PhaseRecorder",
    "ExciteConfig",
    "RepeatConfig",
]

if TYPE_CHECKING:  # pragma: no cover
    from jouleprof.measurement import measure
    from jouleprof.sensors.sampler import Sampler
    from jouleprof.timeline.excite import ExciteConfig
    from jouleprof.timeline.recorder import PhaseRecorder
    from jouleprof.timeline.repeat import RepeatConfig


def __getattr__(name: str) -> Any:
    # Lazy so that `import jouleprof` (and `jouleprof --help`) stays light.
    if name == "measure":
        from jouleprof.measurement import measure

        return measure
    if name == "Sampler":
        from jouleprof.sensors.sampler import Sampler

        return Sampler
    if name == "PhaseRecorder":
        from jouleprof.timeline.recorder import PhaseRecorder

        return PhaseRecorder
    if name == "ExciteConfig":
        from jouleprof.timeline.excite import ExciteConfig

        return ExciteConfig
    if name == "RepeatConfig":
        from jouleprof.timeline.repeat import RepeatConfig

        return RepeatConfig
    raise AttributeError(f"module 'jouleprof' has no attribute {name!r}")
