"""Where jouleprof keeps what it can rebuild: synthesized clips, counted FLOPs.

$JOULEPROF_CACHE_DIR, else $XDG_CACHE_HOME/jouleprof, else ~/.cache/jouleprof. Everything under
it is derived and safe to delete; each entry is named by a hash of what produced it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any


def cache_root() -> Path:
    root = os.environ.get("JOULEPROF_CACHE_DIR")
    if root is None:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = str(Path(xdg) / "jouleprof") if xdg else str(Path.home() / ".cache" / "jouleprof")
    return Path(root).expanduser()


def key_of(obj: Any) -> str:
    """A short stable hash of a JSON-able object (sorted keys)."""
    text = json.dumps(obj, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def read_json(kind: str, key: str) -> Any | None:
    """The cached JSON entry, or None when missing or unreadable (a broken entry is rebuilt)."""
    p = cache_root() / kind / f"{key}.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def write_json(kind: str, key: str, value: Any) -> None:
    """Store an entry atomically; a cache that cannot be written is skipped, not an error."""
    folder = cache_root() / kind
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(value))
        tmp.replace(folder / f"{key}.json")
    except OSError:
        pass
