"""Error classes. Every message says what was wrong and how to fix it."""

from __future__ import annotations


class JouleprofError(Exception):
    """Base class of the errors jouleprof raises for users (bad input, missing hardware)."""


class SensorError(JouleprofError):
    """A sensor could not be opened or read (vendor errors are mapped to this in each sensor)."""


class SensorUnavailable(SensorError):
    """A sensor does not exist on this machine or may not be read (no driver, no permission)."""


class RunDirError(JouleprofError):
    """A run directory is missing, malformed or cannot be written."""


class AttributionError(JouleprofError):
    """Recorded data cannot support the attribution that was asked for."""


class ConfigError(JouleprofError, ValueError):
    """A configuration field holds a value outside what it allows."""
