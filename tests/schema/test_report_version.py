"""The disclosure report's schema version names its fields: a report made by other rules is
told apart from one whose figures do not follow from the archives (``verify`` says
``rederivation_other_rules`` instead of ``rederivation_mismatch``) only if every change of the
report's fields bumps ``REPORT_SCHEMA_VERSION``. This pins each version's field shape."""

from __future__ import annotations

from typing import Any

from schema.canonical import canonical_json, sha256_tag
from schema.report import REPORT_SCHEMA_VERSION, DisclosureReport

#: schema version -> digest of the report model's JSON schema without titles and descriptions
#: (wording may change freely; fields, types and defaults may not without a new version)
PINNED = {
    "1.1": "sha256:9ce340a5b97cfe511762cfc3a73375072e3034c5602cd29dfb34a078bca1580c",
    "1.2": "sha256:d0231337e0806e873a26aa50a1ae8ee34e2ada742fc4d699a1f522063910a3f5",  # aggregate.series
    "1.3": "sha256:f51b32b152943df2d6d09a064108e269014d540d11bcbc1353c34802396d72ce",  # backfill shares
    # aggregate.per_request (the period's per-request figures, SCI band), inputs.one_sided_files
    # and inputs.files[].one_sided_windows
    "1.4": "sha256:799bdeea3ef69474d99398fdc1333a0934a89428f0054dfa41d8553b615bb169",
    "1.5": "sha256:97277f6b6c35b293e51280cbb16d885bd7953afd2bf077c324f7f27b0f18a77b",  # warning count_saturated
}


def _shape(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _shape(v) for k, v in node.items() if k not in ("title", "description")}
    if isinstance(node, list):
        return [_shape(v) for v in node]
    return node


def shape_digest() -> str:
    return sha256_tag(canonical_json(_shape(DisclosureReport.model_json_schema())))


def test_the_report_schema_version_is_bumped_with_its_fields() -> None:
    digest = shape_digest()
    pinned = PINNED.get(REPORT_SCHEMA_VERSION)
    assert pinned == digest, (
        f"the disclosure report's fields are {digest}, not what schema version "
        f"{REPORT_SCHEMA_VERSION} pins ({pinned}): when fields change, bump REPORT_SCHEMA_VERSION "
        "in schema/report.py (say what changed in its comment and in docs/report-format.md) and "
        "add the new version's digest to PINNED here; an old version's digest never changes")


def test_pinned_versions_are_distinct() -> None:
    assert len(set(PINNED.values())) == len(PINNED)
