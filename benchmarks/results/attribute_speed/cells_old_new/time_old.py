import sys, time, os
from jouleprof.attribution import attribute
for d in sys.argv[1:]:
    c0=time.process_time(); t=time.perf_counter()
    r=attribute(d,"regression")
    print(d, "wall %.1f cpu %.1f"%(time.perf_counter()-t, time.process_time()-c0), flush=True)
