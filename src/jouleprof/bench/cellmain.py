"""Entry point of one cell in its own process: `python -m jouleprof.bench.cellmain CONFIG.json OUT`.

Exit status: 0 done, 3 out of memory (recorded in the cell's run.json), 1 any other failure
(the message goes to stderr and to OUT/error.txt, so the study records it even when the cell
died before writing run.json).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

EXIT_OOM = 3


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m jouleprof.bench.cellmain CONFIG.json OUT_DIR", file=sys.stderr)
        return 2
    from jouleprof.bench.train import CellConfig, run_cell
    from jouleprof.bench.warmup import WarmupRule
    from jouleprof.store.rundir import RunDir

    out = Path(args[1])
    try:
        d = json.loads(Path(args[0]).read_text())
        d["warmup"] = WarmupRule(**d.get("warmup", {}))
        if d.get("gpus") is not None:
            d["gpus"] = tuple(d["gpus"])
        run_cell(CellConfig(**d), out)
        rec = RunDir(out).read_record()
        return EXIT_OOM if rec.extra.get("oom") else 0
    except Exception as e:
        from jouleprof.bench.matrix import write_cell_error

        print(f"cell failed: {write_cell_error(out, e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
