"""The fold: sanitised window lines -> AggregateState, and the ordered merge of two states.

- ``rules``     the per-window rules as plain functions and the caps (no state)
- ``sums``      the accumulators a state is made of (per service, region, bucket, layout)
- ``state``     ``AggregateState`` and its merge (``merge``, ``Known``/``seeded`` for refolds)
- ``reference`` the fold in Python: the reference, and the fallback without the C build
- ``fast``      the seam: ``fold_line`` (the C accelerator in front of the reference where
  it is built) and ``ACCELERATED``
- ``ext``       the C extension (``_fold.c``) if built by the current ``FOLD_VERSION``
"""
