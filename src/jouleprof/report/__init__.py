"""Reports: figures, tables and report.html of a run or a study directory, from its files alone.

`jouleprof report DIR` and `jouleprof profile` use `build_report`, `write_run_report` and
`write_study_report`. Nothing here touches a GPU or imports torch; matplotlib and jinja2 are
imported only when a report is written.
"""

from jouleprof.report.html import (
    Report,
    build_report,
    detect,
    write_run_report,
    write_study_report,
)

__all__ = ["Report", "build_report", "detect", "write_run_report", "write_study_report"]
