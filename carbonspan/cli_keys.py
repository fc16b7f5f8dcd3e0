"""``carbonspan keys``: make and show the Ed25519 keys that sign checkpoints and reports."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from schema.note import COSIGNATURE_V1, ED25519, NoteError, Signer

EPILOG = """examples:
  carbonspan keys generate --name node-a --out /etc/carbonspan/node-a.key
  carbonspan keys generate --name witness.example/w1 --witness --out w1.key
  carbonspan keys public /etc/carbonspan/node-a.key

  An agent's key name must be its agent id (the checkpoint origin); keep the key outside the
  archive directory and give it to the agent as [agent.signing] key_file. The private key is
  written with mode 600 next to FILE.pub, which holds the verifier key an auditor pins in
  keys.toml ([agents], [witnesses] with --witness, or [signers] for 'aggregate --sign').
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "keys", help="make and show Ed25519 signing keys (agents, witnesses, report signers)",
        description="Generate an Ed25519 key pair in the C2SP signed-note key format, or print "
        "the public (verifier) key of a private key file.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    g = sub.add_parser("generate", help="make a key pair", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    g.add_argument("--name", required=True,
                   help="key name: the agent id for an agent, the witness or signer name otherwise")
    g.add_argument("--out", type=Path, required=True, help="private key file to create (mode 600)")
    g.add_argument("--witness", action="store_true",
                   help="a witness cosignature key (tlog-cosignature/v1, type 0x04)")
    g.set_defaults(func=_generate)
    s = sub.add_parser("public", help="print the verifier key of a private key file", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("key_file", type=Path)
    s.set_defaults(func=_public)


def _generate(args: argparse.Namespace) -> int:
    try:
        signer = Signer.generate(args.name, COSIGNATURE_V1 if args.witness else ED25519)
    except NoteError as exc:
        print(f"carbonspan keys: error: --name: {exc}", file=sys.stderr)
        return 2
    try:
        fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        print(f"carbonspan keys: error: {args.out} exists; keys are never overwritten "
              "(move it away first)", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"carbonspan keys: error: cannot create {args.out}: {exc.strerror}", file=sys.stderr)
        return 2
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(signer.encode() + "\n")
    vkey = signer.verifier.encode()
    args.out.with_name(args.out.name + ".pub").write_text(vkey + "\n", encoding="ascii")
    print(vkey)
    entry = f"\"{args.name}\" = \"{vkey}\""
    if args.witness:
        print(f"# pin it in keys.toml:  [witnesses]  {entry}", file=sys.stderr)
    else:  # the same key type signs checkpoints and reports: which table is the key's use
        print(f"# pin it in keys.toml:  [agents]  {entry}   (an agent's key: its name is the agent id)",
              file=sys.stderr)
        print(f"#                   or  [signers]  {entry}   (a report signer's, for 'aggregate --sign')",
              file=sys.stderr)
    return 0


def _public(args: argparse.Namespace) -> int:
    try:
        print(Signer.parse(args.key_file.read_text(encoding="ascii")).verifier.encode())
    except (OSError, UnicodeDecodeError, NoteError) as exc:
        print(f"carbonspan keys: error: {args.key_file}: {exc}", file=sys.stderr)
        return 2
    return 0
