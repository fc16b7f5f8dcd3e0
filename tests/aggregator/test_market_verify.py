"""carbonspan verify on a report with a market-based Scope 2 figure: it re-derives with the
factors the report declares (no file needed) and fails on an edited market figure."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from aggregator import synth
from aggregator.report import content_hash
from carbonspan.cli import main
from schema.models import HostRow

T0 = datetime(2026, 11, 10, tzinfo=UTC)
FACTORS_TOML = '[market]\nsource = "EDF PPA; AIB residual mix 2024"\n[market.regions]\neu-west-3 = 0.0\neu-central-1 = 713\n'


def _archive(root):
    """6 windows of three services (eu-west-3, eu-central-1, pl) and a database host, 3 files."""
    svcs = [synth.Svc("api", "eu-west-3", 0.002), synth.Svc("pay", "eu-central-1", 0.001),
            synth.Svc("batch", "pl", 0.004)]
    host = [HostRow(name="pg", kind="database", region="eu-central-1", energy_kwh=0.004, co2_gco2=1.51616)]
    reports = [synth.window_report(T0 + timedelta(minutes=i), svcs, hosts=host) for i in range(6)]
    synth.write_agent(root, "agent-a", synth.split(synth.sealed_lines(reports), 3), day="20261110")
    return root


def _aggregate(root, out, *extra) -> int:
    return main(["aggregate", str(root), "--from", "2026-11-01", "--to", "2026-11-30", "--org", "ACME",
                 "--out", str(out), *extra])


def test_verify_rederives_with_the_reports_own_factors_and_catches_an_edited_market_figure(tmp_path, capsys):
    root = _archive(tmp_path / "a")
    factors, out = tmp_path / "market.toml", tmp_path / "report.json"
    factors.write_text(FACTORS_TOML)
    assert _aggregate(root, out, "--market-factors", str(factors)) == 0
    factors.unlink()  # the auditor does not need the file: the report declares its factors
    assert main(["verify", str(root), "--report", str(out)]) == 0
    assert "re-derives to the same content hash" in capsys.readouterr().out
    report = json.loads(out.read_bytes())
    assert report["methodology"]["market_factors"]["regions"] == {"eu-central-1": 713.0, "eu-west-3": 0.0}

    def check(edit, *kinds: str, rehash: bool = True) -> str:
        edited = json.loads(out.read_bytes())
        edit(edited)
        if rehash:  # a forger who also recomputes the content hash
            edited["integrity"]["content_hash"] = content_hash(edited)
        bad = tmp_path / "edited.json"
        bad.write_text(json.dumps(edited))
        assert main(["verify", str(root), "--report", str(bad)]) == 1
        text = capsys.readouterr().out
        assert all(k in text for k in kinds), text
        return text

    def lower_market(r):
        r["aggregate"]["scope2"]["market_based_kgco2eq"] *= 0.5

    check(lower_market, "report_hash_mismatch", "rederivation_mismatch", rehash=False)
    text = check(lower_market, "rederivation_mismatch")
    assert "report_hash_mismatch" not in text and "sections that differ: aggregate" in text

    def lower_region(r):
        r["aggregate"]["scope2"]["regions"][0]["market_based_kgco2eq"] = 0.0

    check(lower_region, "rederivation_mismatch")

    def other_factor(r):  # a factor changed without the figures: they no longer follow from it
        r["methodology"]["market_factors"]["regions"]["eu-central-1"] = 300.0

    assert "aggregate" in check(other_factor, "rederivation_mismatch")

    def drop_factors(r):  # the block removed but the figures kept
        del r["methodology"]["market_factors"]

    check(drop_factors, "rederivation_mismatch")

    def bad_factor(r):
        r["methodology"]["market_factors"]["regions"]["eu-central-1"] = -1.0

    assert "methodology.market_factors.regions eu-central-1 = -1.0 is negative" in check(bad_factor, "report_unreadable")
