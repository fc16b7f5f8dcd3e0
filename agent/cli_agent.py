"""``carbonspan agent``: run the OTLP agent (gRPC :4317, HTTP :4318) writing archives."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

EPILOG = """\
examples:
  carbonspan agent                                  # 127.0.0.1:4317/4318, ./archives/<host>/
  carbonspan agent --config carbonspan.toml --archive-dir /var/lib/carbonspan
  CARBONSPAN_WINDOW_SECONDS=10 carbonspan agent --grpc-port 14317 --http-port 14318

Port 0 picks a free port (printed on start). Settings come from the [agent] tables of the
config, then CARBONSPAN_* variables, then these flags; see docs/operations.md.
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
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from agent.archive import ArchiveError
    from agent.config import ConfigError, load_config
    from agent.daemon import serve
    from agent.daemon_config import env_typos, resolve

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
             "window_seconds": args.window_seconds, "max_window_spans": args.max_window_spans},
        )
        return serve(settings, cfg)
    except (ConfigError, ArchiveError) as exc:
        print(f"carbonspan agent: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    except OSError as exc:
        print(f"carbonspan agent: cannot start: {exc}", file=sys.stderr)
        return 1
