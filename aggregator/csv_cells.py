"""The CSV files' cells and text, shared by the report's CSVs and the comparison's (one
module below both, so neither renderer imports the other's)."""

from __future__ import annotations

import csv
import io


def num(value: float) -> str:
    """A figure as Python writes a float (round-trips exactly)."""
    return repr(float(value))


def csv_text(headers: tuple[str, ...], rows: list[list[str]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(headers)
    writer.writerows(rows)
    return buf.getvalue()
