"""Window lines in, disclosure report out (docs/report-format.md, docs/auditors-guide.md).

- ``files``   find and open archive files (local paths, fsspec URLs, plain/rotated/gzip)
- ``read``    lines -> sanitised window records (``sanitize`` holds the value rules)
- ``fold``    the wing that folds windows into an ``AggregateState`` (rules, accumulators, the
  state and its ordered merge, the reference fold, the C accelerator and the seam between
  them: ``fold.fast.fold_line``); ``Known``/``seeded`` for refolding a file that overflowed
  a cap on its own
- ``engines`` ``run_local`` / ``run_dask``: fold per file, merge in file order (``merge_next``)
- ``report``  state -> ``schema.report.DisclosureReport`` + content hash; ``render``/``render_html``
- ``verify``  the auditor's checks: chains, window invariants, re-derivation
- ``synth``   sealed synthetic archives for tests, the benchmark and demos

The aggregator never imports ``agent``; both import ``schema``.
"""
