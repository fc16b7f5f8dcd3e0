"""What carbonspan extracted from each span, and why: ``carbonspan score --explain``.

The first question when a figure looks odd is "which of my spans cost energy, with which
weight, in which region, and why". Every answer here comes from the code that makes the
figures, not from a description of it:

- the I/O class and the attributes that decided it: ``agent.otlp.rules.classify_why``, the
  rule the decoders apply (a builder that records each span sees what the rules saw);
- the region and where it came from: the span's own ``cloud.region``, else its resource's
  (both as the decoder validated them), else ``[green.service_regions]``, else
  ``default_region``, else ``unknown`` (the order of ``agent.score``);
- the weight: ``agent.carbon.model``'s operation table and HTTP size bands;
- energy, carbon and the energy-model tag: each span scored alone by ``agent.score`` with the
  same context as the window, so the rows add up to the window report's figures (linear
  per span; embodied carbon and hosts are per window, not per span, and are not rows).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from agent.batch import OP_CLASS_NAMES, OP_HTTP
from agent.carbon.model import http_weights, op_weight_table
from agent.carbon.tagcodes import TAGS
from agent.otlp.rules import (
    AttrValue,
    BatchBuilder,
    Resource,
    classify_why,
    valid_region,
)
from agent.score import ScoringContext, score_batch

#: Columns of the table a narrow terminal never folds: figures and short names.
_WHOLE = frozenset({"kind", "I/O", "weight", "energy kWh", "carbon gCO2e", "model"})
KIND_NAMES = ("unspecified", "internal", "server", "client", "producer", "consumer")


@dataclass(frozen=True, slots=True)
class Seen:
    """What the rules saw of one span that got a row."""

    service: str
    name: str
    kind: int
    own_region: bool  # its own cloud.region was valid (else the resource's, if any)
    resource_region: bool
    attrs: dict[str, AttrValue]


class RecordingBuilder(BatchBuilder):
    """A BatchBuilder that keeps, for every span given a row, what the rules were given; with
    ``limit``, for the first ``limit`` such spans only (``rows`` counts them all)."""

    def __init__(self, limit: int | None = None) -> None:
        super().__init__()
        self.seen: list[Seen] = []
        self.limit = limit
        self.rows = 0  # spans given a row, recorded or not

    def add_span(self, res: Resource, trace_id: bytes, parent_span_id: bytes | None, name: str,
                 kind: int, start: int, end: int, attrs: dict[str, AttrValue]) -> None:
        rows = len(self._rows)
        super().add_span(res, trace_id, parent_span_id, name, kind, start, end, attrs)
        if len(self._rows) > rows:  # a rejected span has no row and no figures
            self.rows += 1
            if self.limit is not None and len(self.seen) >= self.limit:
                return
            self.seen.append(
                Seen(res.service or "unknown_service", name, kind,
                     valid_region(attrs.get("cloud.region")), res.region is not None,
                     dict(attrs))
            )


@dataclass(frozen=True, slots=True)
class SpanExplanation:
    service: str
    span: str
    kind: str
    io_class: str  # OP_CLASS_NAMES: none (a request, or internal work), select, ..., messaging
    decided_by: list[str]  # "key=value" of the attributes that decided the class
    weight: float
    region: str
    region_from: str  # span | resource | config | default | unknown
    energy_kwh: float
    carbon_gco2: float
    energy_model: str

    def as_dict(self) -> dict:
        return asdict(self)


def _region_from(seen: Seen, ctx: ScoringContext) -> str:
    if seen.own_region:
        return "span"
    if seen.resource_region:
        return "resource"
    if seen.service.lower() in ctx.config.service_regions:
        return "config"
    return "default" if ctx.config.default_region else "unknown"


def _weight(op: int, size: int, ctx: ScoringContext) -> float:
    coefficients = ctx.config.per_operation_coefficients
    if op == OP_HTTP and coefficients:
        return float(http_weights(np.array([size], np.int64))[0])
    return float(op_weight_table(coefficients)[op])


def _shown(attrs: dict[str, AttrValue], key: str) -> str:
    value = attrs.get(key)
    text = value if isinstance(value, str) else str(value)
    return f"{key}={text[:60]}{'…' if len(text) > 60 else ''}"


def explain(builder: RecordingBuilder, ctx: ScoringContext) -> list[SpanExplanation]:
    """One explanation per span given a row, in the order the files hold them."""
    batch = builder.build()
    rows = []
    for i, seen in enumerate(builder.seen):
        op, size, keys = classify_why(seen.kind, seen.attrs)
        assert op == int(batch.op_class[i]), "the recorded span is not the batch's row"
        partial = score_batch(batch.take(slice(i, i + 1)), ctx)
        cell_tags = [TAGS[int(c)] for c in partial.etag] or [""]
        rows.append(
            SpanExplanation(
                service=partial.services[0] if partial.services else seen.service.lower(),
                span=seen.name,
                kind=KIND_NAMES[seen.kind] if 0 <= seen.kind < len(KIND_NAMES) else str(seen.kind),
                io_class=OP_CLASS_NAMES[op],
                decided_by=[_shown(seen.attrs, k) for k in keys],
                weight=_weight(op, size, ctx),
                region=partial.regions[int(partial.cell_reg[0])] if partial.regions else "",
                region_from=_region_from(seen, ctx),
                energy_kwh=float(partial.energy.sum()),
                carbon_gco2=float(partial.carbon.sum()),
                energy_model=cell_tags[0] if op else "",
            )
        )
    return rows


def render(rows: list[SpanExplanation], as_json: bool, batch: dict | None = None,
           notes: tuple[str, ...] = (), width: int = 200) -> bytes:
    """JSON (``{"spans": [...], "totals": {...}}``, plus ``"batch": batch`` when given) or a
    table ``width`` columns wide with a totals line (``notes`` printed above it)."""
    totals = {
        "spans": len(rows),
        "io_spans": sum(1 for r in rows if r.io_class != "none"),
        "energy_kwh": float(sum(r.energy_kwh for r in rows)),
        "carbon_gco2": float(sum(r.carbon_gco2 for r in rows)),
    }
    if as_json:
        import orjson

        doc = {"spans": [r.as_dict() for r in rows], "totals": totals}
        if batch is not None:
            doc = {"batch": batch, **doc}
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"
    import io

    from rich.console import Console
    from rich.table import Table

    table = Table(title="what carbonspan extracted from each span", title_justify="left")
    for column, justify in (("service", "left"), ("span", "left"), ("kind", "left"),
                            ("I/O", "left"), ("decided by", "left"), ("weight", "right"),
                            ("region (from)", "left"), ("energy kWh", "right"),
                            ("carbon gCO2e", "right"), ("model", "left")):
        # figures and short names are never broken; a narrow terminal folds the free text
        table.add_column(column, justify=justify, overflow="fold",  # type: ignore[arg-type]
                         no_wrap=column in _WHOLE)
    for r in rows:
        table.add_row(r.service, r.span, r.kind, r.io_class, ", ".join(r.decided_by) or "-",
                      f"{r.weight:g}", f"{r.region} ({r.region_from})", f"{r.energy_kwh:.3e}",
                      f"{r.carbon_gco2:.3e}", r.energy_model or "-")
    out = io.StringIO()
    out.write("".join(f"{note}\n" for note in notes))
    # span names and attribute values are the user's text: never rich markup or emoji codes
    # (a statement holding "[/x]" was a MarkupError traceback, "[eu]" vanished from a name)
    Console(file=out, width=width, force_terminal=False, color_system=None, markup=False,
            emoji=False, highlight=False).print(table)
    out.write(
        f"{totals['spans']} spans, {totals['io_spans']} I/O: {totals['energy_kwh']:.6e} kWh, "
        f"{totals['carbon_gco2']:.6e} gCO2e operational (the window report's "
        "per-service sums; embodied carbon and hosts are per window, not per span)\n"
    )
    return out.getvalue().encode()
