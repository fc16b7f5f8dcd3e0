"""``carbonspan agent``: run the OTLP agent (gRPC :4317, HTTP :4318) writing archives."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

EPILOG = """\
examples:
  carbonspan agent                                  # 127.0.0.1:4317/4318, a worker per core
  carbonspan agent --workers 1                      # one process, ./archives/<host>/
  carbonspan agent --config carbonspan.toml --archive-dir /var/lib/carbonspan
  CARBONSPAN_WINDOW_SECONDS=10 carbonspan agent --grpc-port 14317 --http-port 14318

With --workers N > 1 this process supervises N agent processes that share both ports
(SO_REUSEPORT), worker k writing its own chain <archive-dir>/<agent-id>-w<k>/; a worker that
dies is restarted on its chain. Port 0 picks a free port (printed on start). Settings come
from the [agent] tables of the config, then CARBONSPAN_* variables, then these flags; see
docs/operations.md.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "agent",
        help="run the OTLP agent (gRPC :4317, HTTP :4318) writing archives",
        description="Receive OTLP traces over gRPC and HTTP, score them in windows and append "
        "one hash-chained line per window to the archive. Stops cleanly on SIGTERM/SIGINT.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", type=Path, default=None,
                   help="carbonspan.toml (default: $CARBONSPAN_CONFIG, else built-in defaults)")
    p.add_argument("--archive-dir", type=Path, default=None,
                   help="archive root; this agent writes <root>/<agent-id>/ (default archives)")
    p.add_argument("--agent-id", default=None, help="this agent's chain name (default: host name)")
    p.add_argument("--bind", default=None, help="address to listen on (default 127.0.0.1)")
    p.add_argument("--grpc-port", type=int, default=None, help="OTLP/gRPC port (default 4317)")
    p.add_argument("--http-port", type=int, default=None, help="OTLP/HTTP port (default 4318)")
    p.add_argument("--window-seconds", type=float, default=None,
                   help="close a window every this many seconds (default 60)")
    p.add_argument("--max-window-spans", type=int, default=None,
                   help="close a window early at this many spans (default 2,000,000)")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="agent processes sharing the ports, each with its own chain "
                   "<agent-id>-w<k> (default 0: one per usable core, at most 8; 1: one process, "
                   "chain <agent-id>, as before)")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from agent.archive import ArchiveError
    from agent.config import ConfigError, load_config
    from agent.daemon import serve
    from agent.daemon_config import env_typos, resolve
    from agent.workers import (
        Worker,
        orphan_error,
        orphaned_chains,
        supervise,
        worker_count,
        worker_from_env,
        worker_settings,
    )

    config_path = args.config or (Path(os.environ["CARBONSPAN_CONFIG"])
                                  if os.environ.get("CARBONSPAN_CONFIG") else None)
    for warning in env_typos(os.environ):
        print(f"carbonspan agent: warning: {warning}", file=sys.stderr)
    try:
        cfg = load_config(config_path)
        settings = resolve(
            cfg.sections.get("agent"),
            os.environ,
            {"archive_dir": args.archive_dir, "agent_id": args.agent_id, "bind": args.bind,
             "grpc_port": args.grpc_port, "http_port": args.http_port,
             "window_seconds": args.window_seconds, "max_window_spans": args.max_window_spans,
             "workers": args.workers},
        )
        worker = worker_from_env(os.environ)
        if worker is not None:  # started by a supervisor (agent/workers.py)
            return serve(worker_settings(settings, worker), cfg, worker)
        count, why = worker_count(settings)
        chains = [settings.agent_id] if count == 1 else [
            worker_settings(settings, Worker(k, count)).agent_id for k in range(count)]
        orphans = orphaned_chains(settings, chains)
        if orphans:
            raise ArchiveError(orphan_error(settings, orphans))
        if count == 1:
            return serve(settings, cfg)
        return supervise(settings, count, why, _worker_argv(args), cfg)
    except (ConfigError, ArchiveError) as exc:
        print(f"carbonspan agent: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    except OSError as exc:
        print(f"carbonspan agent: cannot start: {exc}", file=sys.stderr)
        return 1


def _worker_argv(args: argparse.Namespace) -> list[str]:
    """The command line of a worker: this one's flags (the config file and environment are
    inherited), every worker on the same settings."""
    argv = [sys.executable, "-m", "carbonspan", "agent"]
    for dest in ("config", "archive_dir", "agent_id", "bind", "grpc_port", "http_port",
                 "window_seconds", "max_window_spans", "workers"):
        value = getattr(args, dest)
        if value is not None:
            argv += [f"--{dest.replace('_', '-')}", str(value)]
    return argv
