"""Window lines in, disclosure report out (docs/report-format.md, docs/auditors-guide.md).

- ``files``   find and open archive files (local paths, fsspec URLs, plain/rotated/gzip)
- ``read``    lines -> sanitised window records (``sanitize`` holds the value rules)
- ``fold``    ``AggregateState.process_window``: runtime vs proxy vs ``_unattributed``, caps
- ``merge``   the ordered merge of two states (left first-seen wins)
- ``engines`` ``run_local`` / ``run_dask``: fold per file, merge in file order
- ``report``  state -> ``schema.report.DisclosureReport`` + content hash; ``render``/``render_html``
- ``verify``  the auditor's checks: chains, window invariants, re-derivation
- ``synth``   sealed synthetic archives for tests, the benchmark and demos

The aggregator never imports ``agent``; both import ``schema``.
"""
