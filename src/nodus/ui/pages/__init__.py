"""The pages of ``nodus ui``, one function each: data from :class:`nodus.Client`, HTML out.

Every page is a whole document built with :mod:`nodus.ui.html` (each value escaped where it
enters); its changing part sits in ``<div id="live">``, which the page's script fetches again
(``?fragment=1``) while something on it can still change. Nothing here writes: the page has no
control that changes a run.

    layout.py          Page and the document frame; the cells every page draws alike
    runs.py            ``/``: every run, a page at a time, filtered by phase and name
    run.py             ``/runs/RUN``: a run's facts, its banner, what ran, its attempts' timeline
    banner.py          how a run stands in words: a failure, a recovery that succeeded, a notice
    what_ran.py        command, interpreter, arguments, the resolved workload; the use now
    run_tables.py      a run's attempts, snapshots, uploads and output (followed live)
    events.py          a run's events: filterable by type, retention's collapsed, details as fields
    metrics.py         ``/runs/RUN/metrics``: the metric curves, one line per attempt, overlays,
                       smoothing, log scale, a time axis; ``metrics.csv``: every series
    lineage_models.py  ``/lineage`` (runs under the runs they started from) and ``/models``
"""

from nodus.ui.pages.layout import Page
from nodus.ui.pages.lineage_models import lineage_page, models_page
from nodus.ui.pages.metrics import chart_options, metrics_csv, metrics_page
from nodus.ui.pages.run import run_page
from nodus.ui.pages.runs import runs_page

__all__ = [
    "Page",
    "chart_options",
    "lineage_page",
    "metrics_csv",
    "metrics_page",
    "models_page",
    "run_page",
    "runs_page",
]
