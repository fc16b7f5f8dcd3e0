"""``carbonspan witness``: run a witness that cosigns consistent checkpoints (C2SP tlog-witness)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

EPILOG = """example:
  carbonspan keys generate --name witness.example/w1 --witness --out /etc/carbonspan/w1.key
  carbonspan witness --key /etc/carbonspan/w1.key --trust /etc/carbonspan/agents.toml \\
      --state-dir /var/lib/carbonspan-witness --bind 0.0.0.0 --port 8443

  The [agents] table of --trust names the logs it witnesses (agent id = verifier key); agents
  push to it with [agent.signing] witnesses = "http://host:8443". Its log of what it cosigned
  is <state-dir>/witness.log, the file an auditor gives to 'carbonspan verify --witness-log'.
  Stops on SIGTERM/SIGINT. See docs/auditors-guide.md.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "witness", help="run a witness that cosigns consistent checkpoints (C2SP tlog-witness)",
        description="Serve C2SP tlog-witness add-checkpoint over HTTP: cosign an agent's signed "
        "checkpoint only if its pinned key signed it and it is consistent with the last one "
        "cosigned for that agent, and keep a hash-chained log of every cosigned checkpoint.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--key", type=Path, required=True,
                   help="the witness's cosignature key (carbonspan keys generate --witness)")
    p.add_argument("--trust", type=Path, required=True,
                   help="keys.toml whose [agents] table lists the logs to witness")
    p.add_argument("--state-dir", type=Path, required=True, help="where witness.log is kept")
    p.add_argument("--bind", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8443, help="listen port (default 8443; 0: any free)")
    p.add_argument("--max-connections", type=int, default=64,
                   help="open connections at most; a new one evicts the longest-idle (default 64)")
    p.add_argument("--timeout-s", type=float, default=10.0,
                   help="deadline for one request (head and body) and for an idle "
                        "keep-alive, seconds (default 10)")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from schema.note import COSIGNATURE_V1, NoteError, Signer
    from schema.trust import Trust, TrustError
    from witness.server import WitnessServer
    from witness.state import Witness, WitnessError

    try:
        signer = Signer.parse(args.key.read_text(encoding="ascii"))
        if signer.sig_type != COSIGNATURE_V1:
            raise NoteError("it is a note-signing key; a witness needs a cosignature key "
                            "(carbonspan keys generate --witness)")
        trust = Trust.load(args.trust)
        if not trust.agents:
            raise TrustError(f"--trust {args.trust} has no [agents]: there is no log to witness")
        witness = Witness(signer, trust.agents, args.state_dir)
        if args.max_connections < 1 or args.timeout_s <= 0:
            raise ValueError("--max-connections and --timeout-s must be positive")
        server = WitnessServer(witness, args.bind, args.port, max_connections=args.max_connections,
                               timeout_s=args.timeout_s)
    except (OSError, UnicodeDecodeError, NoteError, TrustError, WitnessError, ValueError) as exc:
        print(f"carbonspan witness: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    server.start()
    print(f"carbonspan witness {signer.name}: listening on {args.bind}:{server.port}, "
          f"{len(trust.agents)} log(s), key {signer.verifier.encode()}", flush=True)
    stop.wait()
    server.stop()
    print(f"carbonspan witness {signer.name}: stopped", flush=True)
    return 0
