"""``nodus ui``: every run, its progress, snapshots, recoveries, lineage and models, in a
browser, read-only (docs/ui.md).

A room above :mod:`nodus.client`: every answer on a page is what :class:`nodus.Client` (opened
read-only) returns, so the page and ``--json`` never disagree; the words for those shapes are
:mod:`nodus.inventory`'s, so a page and ``runs get`` say a run's progress alike. Nothing here is
imported before ``nodus ui`` is asked for, and nothing here imports an ML framework.

    server.py    the HTTP server: routes, methods, the access token, loopback's Host check
    pages/       one function per page (runs, a run, metrics, lineage, models): data → HTML
    charts.py    the SVG charts, drawn on the server: metric curves, the attempts' timeline
    html.py      the HTML builder: every value escaped unless it is markup already
    assets/      ui.css and ui.js, served by name from a fixed list
"""
