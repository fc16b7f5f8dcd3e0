"""Signed reports: aggregate --sign writes an in-toto Statement in a DSSE envelope; verify
--attestation checks who signed it, that it is about these report bytes, and that the archive
still holds the signed heads it names."""

from __future__ import annotations

import base64
import contextlib
import io

import orjson

from carbonspan.cli import main
from schema.checkpoint import CHECKPOINTS_NAME
from schema.dsse import PAYLOAD_TYPE, PREDICATE_TYPE


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(list(argv))
    return code, out.getvalue()


def period(root) -> tuple[str, str]:
    days = sorted({p.name.split("-")[1] for p in root.rglob("windows-*.jsonl")})
    fmt = lambda d: f"{d[:4]}-{d[4:6]}-{d[6:]}"  # noqa: E731
    return fmt(days[0]), fmt(days[-1])


def aggregate(root, out, *flags: str) -> None:
    start, end = period(root)
    code, text = run("aggregate", str(root), "--from", start, "--to", end, "--org", "ACME",
                     "--out", str(out), *flags)
    assert code == 0, text


def cut_energy(rec: dict, _n: int) -> None:
    """The issue's forger: agent A's energy cut by 34 % (the chain is re-sealed after)."""
    gs = rec["report"]["green_summary"]
    gs["energy_kwh"] *= 0.66
    for k in gs["per_service_energy_kwh"]:
        gs["per_service_energy_kwh"][k] *= 0.66


def test_a_signed_report_verifies_and_names_the_witnessed_heads(signed_archive, tmp_path) -> None:
    s = signed_archive
    report = tmp_path / "report.json"
    aggregate(s.root, report, "--sign", str(s.keys / "reporting.key"))
    env = orjson.loads((tmp_path / "report.json.intoto.json").read_bytes())
    assert env["payloadType"] == PAYLOAD_TYPE
    statement = orjson.loads(base64.b64decode(env["payload"]))
    assert statement["predicateType"] == PREDICATE_TYPE
    assert statement["subject"][0]["name"] == "report.json"
    heads = {h["origin"]: h for h in statement["predicate"]["checkpoints"]}
    assert set(heads) == {"agent-a", "agent-b"}
    assert all("\u2014 witness.test/w1 " in h["note"] for h in heads.values())  # cosignatures kept
    code, out = run("verify", str(s.root), "--report", str(report), "--attestation",
                    str(tmp_path / "report.json.intoto.json"), "--trust", str(s.witnessed),
                    "--witness-log", str(s.witness_log))
    assert code == 0, out
    # the OK names what the signed inputs were checked for, not only the chains and the report
    assert (f"  attestation {tmp_path / 'report.json.intoto.json'}: signed by reporting (pinned in "
            "[signers]) over this report's SHA-256; every head it names is in the archive") in out
    assert (f"  witness log {s.witness_log}: an intact chain, every record cosigned by a pinned "
            "witness and consistent with the archive") in out


def test_a_report_regenerated_from_a_forgery_fails_however_it_is_signed(signed_archive, tmp_path, tools) -> None:
    s = signed_archive
    report, att = tmp_path / "report.json", tmp_path / "report.json.intoto.json"
    aggregate(s.root, report, "--sign", str(s.keys / "reporting.key"))
    root = s.copy("regenerated")
    tools.rewrite(root / "agent-a", cut_energy)
    aggregate(root, report)  # the forger regenerates the report; the old attestation stays
    code, out = run("verify", str(root), "--report", str(report), "--attestation", str(att),
                    "--trust", str(s.trust))
    assert code == 1 and "attestation_subject_mismatch" in out and "checkpoint_root_mismatch" in out
    assert run("keys", "generate", "--name", "reporting", "--out", str(tmp_path / "forger.key"))[0] == 0
    aggregate(root, report, "--sign", str(tmp_path / "forger.key"))  # ... or signs it himself
    code, out = run("verify", str(root), "--report", str(report), "--attestation", str(att),
                    "--trust", str(s.trust))
    assert code == 1 and "attestation_bad_signature" in out, out


def test_an_archive_cut_after_the_report_misses_the_head_it_names(signed_archive, tmp_path) -> None:
    s = signed_archive
    report, att = tmp_path / "report.json", tmp_path / "report.json.intoto.json"
    aggregate(s.root, report, "--sign", str(s.keys / "reporting.key"))
    root = s.copy("cut-after-report")
    d = root / "agent-b"
    last = sorted(d.glob("windows-*.jsonl"))[-1]
    last.unlink()
    n = sum(len(p.read_bytes().splitlines()) for p in d.glob("windows-*.jsonl"))
    recs = [r for r in (d / CHECKPOINTS_NAME).read_bytes().splitlines()
            if int(orjson.loads(r)["note"].split("\n")[1]) <= n]
    (d / CHECKPOINTS_NAME).write_bytes(b"".join(r + b"\n" for r in recs))
    code, out = run("verify", str(root), "--report", str(report), "--attestation", str(att),
                    "--trust", str(s.trust))
    assert code == 1 and "attestation_checkpoint_missing" in out, out


def test_sign_needs_out_and_a_readable_key(signed_archive, tmp_path) -> None:
    s = signed_archive
    start, end = period(s.root)
    assert run("aggregate", str(s.root), "--from", start, "--to", end, "--sign",
               str(s.keys / "reporting.key"))[0] == 2
    (tmp_path / "bad.key").write_text("not a key\n")
    assert run("aggregate", str(s.root), "--from", start, "--to", end, "--out",
               str(tmp_path / "r.json"), "--sign", str(tmp_path / "bad.key"))[0] == 2
    assert not (tmp_path / "r.json").exists()  # refused before reading the archives


def test_a_signed_report_is_told_the_verify_command_that_checks_its_attestation(signed_archive, tmp_path) -> None:
    s = signed_archive
    start, end = period(s.root)
    report = tmp_path / "report.json"
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["aggregate", str(s.root), "--from", start, "--to", end, "--out", str(report),
                     "--sign", str(s.keys / "reporting.key")])
    assert code == 0, err.getvalue()
    att = tmp_path / "report.json.intoto.json"
    line = next(t for t in err.getvalue().splitlines() if "were not verified by this run" in t)
    assert (f"carbonspan verify {s.root} --report {report} --trust keys.toml --attestation {att} "
            "(or aggregate --verify)") in line
    # the command as printed, with the auditor's keys.toml, verifies
    code, out = run("verify", str(s.root), "--report", str(report), "--trust", str(s.witnessed),
                    "--attestation", str(att))
    assert code == 0, out
