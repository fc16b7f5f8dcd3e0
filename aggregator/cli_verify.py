"""``carbonspan verify``: the auditor's check of archives and, optionally, a report."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from aggregator.files import discover
from aggregator.report import load_report
from aggregator.verify import verify_archives, verify_report

EPILOG = """examples:
  carbonspan verify archives/ --report report.json
  carbonspan verify archives/ --trust keys.toml --witness-log w1/witness.log \\
      --report report.json --attestation report.json.intoto.json

  With --trust every agent's signed checkpoints are checked against its pinned key, every line
  against them (Merkle inclusion), consecutive checkpoints for consistency, and the witness
  cosignatures; docs/auditors-guide.md explains each finding.

  Exit status 0 when every chain, every window invariant and (with --report) the report's
  content hash hold; 1 with one finding per line otherwise; 2 when an input cannot be read.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "verify",
        help="auditor: check hash chains, invariants and a report",
        description="Check each agent's hash chain across its archive files, each window's "
        "invariants, and with --report re-derive the report from the archives and compare "
        "content hashes.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="+", metavar="ARCHIVE_PATH")
    p.add_argument("--report", type=Path, help="a disclosure report (JSON) to re-derive and compare")
    p.add_argument("--previous", type=Path, metavar="PREVIOUS_JSON",
                   help="the previous report a --report made with 'aggregate --compare' was compared with: "
                        "its comparison is then checked against this file (else against the figures it states)")
    p.add_argument("--trust", type=Path, metavar="KEYS_TOML",
                   help="pinned public keys of agents, witnesses and report signers (keys.toml)")
    p.add_argument("--witness-log", type=Path, action="append", default=[], metavar="FILE",
                   help="a witness's log of cosigned checkpoints (repeatable; needs --trust)")
    p.add_argument("--attestation", type=Path, metavar="FILE",
                   help="the signed statement 'aggregate --sign' wrote beside --report (needs --trust)")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    try:
        files = discover(args.paths)
    except (OSError, ValueError) as exc:
        print(f"carbonspan verify: error: {exc}", file=sys.stderr)
        return 2
    report = None
    if args.report is not None:
        try:
            report = load_report(args.report.read_bytes())
        except OSError as exc:
            print(f"carbonspan verify: error: cannot read --report {args.report}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        except ValueError as exc:
            print(f"carbonspan verify: error: --report {args.report} is not a disclosure report ({exc}); "
                  "give the JSON file written by 'carbonspan aggregate --out'", file=sys.stderr)
            return 2
    previous = None
    if args.previous is not None:
        if report is None:
            print("carbonspan verify: error: --previous needs the --report that was compared with it",
                  file=sys.stderr)
            return 2
        try:
            previous = load_report(args.previous.read_bytes())
        except (OSError, ValueError) as exc:
            print(f"carbonspan verify: error: cannot read --previous {args.previous} as a JSON report: {exc}",
                  file=sys.stderr)
            return 2
    if not files:
        print(f"carbonspan verify: error: no window files under {', '.join(args.paths)}", file=sys.stderr)
        return 2
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="note: %(message)s", stream=sys.stderr)
    signed = signed_checks(args, files)
    if isinstance(signed, int):
        return signed
    findings, chains = verify_archives(files)
    if report is not None:
        findings.extend(verify_report(files, report, previous))
    findings.extend(signed[0])
    heads = {s.agent: s for s in signed[1]}
    checked = signed[2]  # what the signed inputs proved, said on an OK (a finding says otherwise)
    for chain in chains:
        print(f"chain {chain.agent}: {chain.records} records, last {chain.last_hash or '-'}")
        if chain.agent in heads:
            print(f"  {heads[chain.agent].describe()}")
    unsigned = sorted(s.agent for s in signed[1] if s.latest is None)
    if not findings:
        extra = " and the report re-derives to the same content hash" if report is not None else ""
        print(f"OK: {len(files)} files, every chain and window invariant holds{extra}")
        for line in checked:
            print(f"  {line}")
        if unsigned:
            print(f"note: unsigned archive(s) {', '.join(unsigned)}: no signed checkpoints, so "
                  "the chain proves integrity only relative to a head you trust by other means")
    else:
        print(f"FAILED: {len(findings)} finding(s)")
        for finding in findings:
            print(f"  {finding}")
    if args.trust is None and len(unsigned) < len(signed[1]):
        print("note: the archive is signed but the signatures were NOT verified (anyone can sign "
              "with a key of their own): give --trust keys.toml to pin the agents' keys")
    return 1 if findings else 0


def signed_checks(args: argparse.Namespace, files: list) -> tuple[list, list, list[str]] | int:
    """The signed-head checks (aggregator.verify_signed) and the attestation; 2 on bad input.
    The third item says what the witness logs and the attestation were checked for, printed
    under an OK so that a clean result names everything it covered."""
    from aggregator.verify_signed import verify_signatures
    from schema.trust import Trust, TrustError

    trust = None
    if args.trust is not None:
        try:
            trust = Trust.load(args.trust)
        except TrustError as exc:
            print(f"carbonspan verify: error: {exc}", file=sys.stderr)
            return 2
    for flag, given in (("--witness-log", args.witness_log), ("--attestation", args.attestation)):
        if given and trust is None:
            print(f"carbonspan verify: error: {flag} needs --trust keys.toml: a signature "
                  "proves something only against a key you pinned", file=sys.stderr)
            return 2
    if args.attestation is not None and args.report is None:
        print("carbonspan verify: error: --attestation needs the --report it is about", file=sys.stderr)
        return 2
    missing = [p for p in args.witness_log if not p.is_file()]
    if missing:
        print(f"carbonspan verify: error: --witness-log {missing[0]}: no such file", file=sys.stderr)
        return 2
    findings, summaries = verify_signatures(files, trust, args.witness_log)
    checked = [f"witness log {p}: an intact chain, every record cosigned by a pinned witness and "
               "consistent with the archive" for p in args.witness_log]
    if args.attestation is not None and trust is not None:
        import orjson

        from aggregator.attest import verify_attestation

        try:
            envelope = orjson.loads(args.attestation.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            print(f"carbonspan verify: error: cannot read --attestation {args.attestation}: {exc}",
                  file=sys.stderr)
            return 2
        found = verify_attestation(envelope, args.report.read_bytes(), trust, summaries)
        findings.extend(found)
        if not found:
            from schema.dsse import open_envelope

            who = open_envelope(envelope, list(trust.signers.values()))[1].name
            checked.append(f"attestation {args.attestation}: signed by {who} (pinned in [signers]) "
                           "over this report's SHA-256; every head it names is in the archive")
    return findings, summaries, checked
