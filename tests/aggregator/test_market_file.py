"""The --market-factors file: every bad value is an error naming the file and the key and
saying what to write (exit 2, before any archive is read); hypothesis over the values."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.market import (
    MarketFactors,
    MarketFactorsError,
    check_factors,
    from_report,
    load_market_factors,
)
from aggregator.scope2 import methodology_block
from carbonspan.cli import main

GOOD = '[market]\nsource = "EDF contract 2026"\n[market.regions]\neu-west-3 = 0.0\neu-central-1 = 713.0\n'
HEAD = '[market]\nsource = "EDF contract 2026"\n[market.regions]\n'

# (file text, what the message must contain besides the file name)
BAD = {
    "bad toml": ("[market\nsource = 1", "not valid TOML"),
    "no market table": ('source = "x"\n', "unknown top-level key 'source'"),
    "empty file": ("", "no [market] table"),
    "market not a table": ('market = "x"\n', "no [market] table"),
    "unknown top-level key": (GOOD + "[extra]\na = 1\n", "unknown top-level key 'extra'"),
    "unknown market key": ('[market]\nsource = "s"\nsorce = "t"\n[market.regions]\npl = 1.0\n',
                           "unknown key 'sorce' in [market]"),
    "missing source": ("[market.regions]\npl = 1.0\n", "source is missing or empty"),
    "empty source": ('[market]\nsource = "  "\n[market.regions]\npl = 1.0\n', "source is missing or empty"),
    "source not text": ('[market]\nsource = 3\n[market.regions]\npl = 1.0\n', "source is missing or empty"),
    "source too long": (f'[market]\nsource = "{"x" * 3000}"\n[market.regions]\npl = 1.0\n', "keep it under 2048"),
    "missing regions": ('[market]\nsource = "s"\n', "no [market.regions] table"),
    "regions not a table": ('[market]\nsource = "s"\nregions = 3\n', "no [market.regions] table"),
    "empty regions": ('[market]\nsource = "s"\n[market.regions]\n', "[market.regions] is empty"),
    "string value": (HEAD + 'pl = "713"\n', "[market.regions] pl = '713' is not a number"),
    "bool value": (HEAD + "pl = true\n", "pl = True is not a number"),
    "array value": (HEAD + "pl = [1.0]\n", "pl = [1.0] is not a number"),
    "table value": (HEAD + "pl.x = 1.0\n", "is not a number"),
    "date value": (HEAD + "pl = 2026-01-01\n", "is not a number"),
    "negative": (HEAD + "pl = -1.0\n", "pl = -1.0 is negative"),
    "nan": (HEAD + "pl = nan\n", "pl = nan is not a finite number"),
    "inf": (HEAD + "pl = inf\n", "pl = inf is not a finite number"),
    "-inf": (HEAD + "pl = -inf\n", "pl = -inf is not a finite number"),
    "absurd": (HEAD + "pl = 713000.0\n", "is above 10,000 gCO2e/kWh"),
    "absurd int": (HEAD + "pl = 9223372036854775807\n", "is above 10,000 gCO2e/kWh"),
    "huge int": (HEAD + "pl = " + "9" * 400 + "\n", "pl = 9999999999999999999999999999999999999... is above"),
    "float overflow": (HEAD + "pl = 1e400\n", "pl = inf is not a finite number"),
    "bad region name": (HEAD + '"eu west 3" = 1.0\n', "key 'eu west 3' is not a region name"),
    "unknown region": (HEAD + "unknown = 1.0\n", "'unknown' is the row of spans without a region"),
    "same region twice": (HEAD + "eu-west-3 = 1.0\nEU-WEST-3 = 2.0\n", "name the same region"),
    "not utf-8": (b'[market]\nsource = "\xff"\n', "not UTF-8"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_every_bad_file_is_exit_2_naming_file_and_key_before_any_folding(case, tmp_path, capsys):
    text, needle = BAD[case]
    path = tmp_path / "market.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    # the archive path does not exist: the factors are checked before the archives are looked at
    code = main(["aggregate", str(tmp_path / "no-archive"), "--from", "2026-11-01", "--to", "2026-11-30",
                 "--market-factors", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"--market-factors {path}: " in err and needle in err, err
    assert "no archive" not in err


def test_unreadable_and_missing_files_say_what_to_give(tmp_path, capsys):
    for path in (tmp_path / "missing.toml", tmp_path):  # absent; a directory
        assert main(["aggregate", str(tmp_path), "--from", "2026-11-01", "--to", "2026-11-30",
                     "--market-factors", str(path)]) == 2
        err = capsys.readouterr().err
        assert f"--market-factors {path}: cannot read the market factors file" in err
        assert "give the path of a TOML file" in err


def test_a_good_file_reads_lowercase_sorted_and_as_floats(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text('[market]\nsource = "s"\n[market.regions]\nPL = 10\neu-west-3 = -0.0\nEU_X = 1e4\n')
    f = load_market_factors(path)
    assert f == MarketFactors("s", {"eu-west-3": 0.0, "eu_x": 10000.0, "pl": 10.0})
    assert list(f.regions) == ["eu-west-3", "eu_x", "pl"] and all(type(v) is float for v in f.regions.values())
    assert math.copysign(1.0, f.regions["eu-west-3"]) == 1.0  # -0.0 is written as 0.0
    assert f.factor("EU-West-3") == 0.0 and f.factor("de") is None


def test_a_reports_block_is_checked_the_same_way():
    block = json.loads(methodology_block(MarketFactors("s", {"pl": 1.5})).model_dump_json())
    assert from_report({"methodology": {"market_factors": block}}) == MarketFactors("s", {"pl": 1.5})
    assert from_report({"methodology": {}}) is None and from_report({}) is None
    for bad, needle in (({**block, "extra": 1}, "unknown key 'extra'"),
                        ({**block, "regions": {"pl": "1"}}, "methodology.market_factors.regions pl = '1'"),
                        ("x", "is not an object")):
        with pytest.raises(MarketFactorsError, match=needle):
            from_report({"methodology": {"market_factors": bad}})


REGION = st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True).filter(lambda r: r != "unknown")
VALUE = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.integers(-(10**400), 10**400),  # tomllib reads integers of any size
    st.booleans(),
    st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=5),  # written as TOML strings
)


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, int):
        return str(v)
    return json.dumps(v)  # printable ASCII: a TOML basic string (JSON's \" and \\ are TOML's)


def _ok(v: object) -> bool:
    return not isinstance(v, bool) and isinstance(v, int | float) and 0 <= v <= 10_000  # NaN compares False


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(REGION, VALUE, min_size=1, max_size=6))
def test_factor_values_are_accepted_exactly_when_finite_non_negative_and_plausible(tmp_path_factory, values):
    path = tmp_path_factory.mktemp("m") / "market.toml"
    path.write_text('[market]\nsource = "s"\n[market.regions]\n'
                    + "".join(f"{k} = {_toml_value(v)}\n" for k, v in values.items()))
    if all(_ok(v) for v in values.values()):
        f = load_market_factors(path)
        assert f.regions == {k: float(v) + 0.0 for k, v in sorted(values.items())}
        # what the report declares reads back as the same factors, bit for bit
        block = json.loads(methodology_block(f).model_dump_json())
        assert check_factors(block, "", "methodology.market_factors") == f
    else:
        bad = next(k for k, v in values.items() if not _ok(v))
        with pytest.raises(MarketFactorsError) as exc:
            load_market_factors(path)
        assert str(exc.value).startswith(f"{path}: [market.regions] {bad} = ")
