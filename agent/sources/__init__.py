"""Measured energy and live grid intensity, polled off the scoring path.

Public interface (see docs/energy-sources.md):

- ``agent.sources.config.parse_sources(table) -> SourcesConfig`` validates ``[sources]``.
- ``agent.sources.manager.SourceManager.from_config(sources_table, green)`` with ``start()``,
  ``stop()``, ``current() -> Signals`` (never blocks on I/O), ``health()`` and ``ops``.
- ``agent.sources.opcounter.OpCounter``: the daemon calls ``manager.ops.add_partial(partial)``
  (or ``add({service: io_ops})``) after each accepted (WAL-durable) batch so energy becomes energy per op.
- ``agent.sources.shared``: with ``--workers N`` the supervisor polls (``SignalHub``) and the
  workers read what it publishes (``SharedSignals``, in the manager's place).
- ``carbonspan calibrate`` (``agent.sources.cli_calibrate``) derives ``[green.calibration]``.
"""
