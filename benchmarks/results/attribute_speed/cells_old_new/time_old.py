"""Wall and CPU seconds of `attribute(RUN, "regression")` for each RUN, in this process, with
whatever jouleprof PYTHONPATH names (the code before the speed work had no stage timer):

    OPENBLAS_NUM_THREADS=2 PYTHONPATH=/tmp/old_d3f976f/src python3 time_old.py RUN ...
"""

import sys
import time

from jouleprof.attribution import attribute

for run in sys.argv[1:]:
    c0, t0 = time.process_time(), time.perf_counter()
    attribute(run, "regression")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"{run} wall {wall:.1f} cpu {cpu:.1f}", flush=True)
