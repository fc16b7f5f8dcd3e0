"""Repeated warnings of one run summarised: the first of a kind is shown, the rest counted.

A kind is the warning's message template (``record.msg`` before its arguments), so "FILE: N
window(s) ... used the I/O-proxy fallback" logged for 300 files prints once, and at the end
of the run one line says how many more there were and where the JSON lists the files
(``WHERE_LISTED``: the report's ``inputs.fallback_files`` for the fallback warning,
``inputs.one_sided_files`` for the one-sided windows' warning, each file's count in
``inputs.files[]``; for any other kind, ``inputs.files``, every file read).
"""

from __future__ import annotations

import logging

#: (a phrase of the warning's template, where the report's JSON lists its files)
WHERE_LISTED = (
    ("I/O-proxy fallback", "the files are listed in the report's inputs.fallback_files and inputs.files"),
    ("only one of per_service", "the files are listed in the report's inputs.one_sided_files, each with its "
     "count in inputs.files[].one_sided_windows"),
)


def where_listed(template: str) -> str:
    for phrase, where in WHERE_LISTED:
        if phrase in template:
            return where
    return "the report's inputs.files lists every file read, without this warning's count per file"


class RepeatSummary(logging.Filter):
    """Lets the first warning of each template through; counts the others."""

    def __init__(self) -> None:
        super().__init__()
        self.first: dict[str, str] = {}
        self.more: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = str(record.msg)
        if key not in self.first:
            self.first[key] = record.getMessage()
            return True
        self.more[key] = self.more.get(key, 0) + 1
        return False

    def lines(self) -> list[str]:
        """One line per template that repeated, in the order first seen."""
        return [f"... and {n:,} more warning(s) like \"{self.first[key][:160]}\" (one per archive file; "
                f"{where_listed(key)})" for key, n in self.more.items()]


def install(logger: logging.Logger) -> RepeatSummary:
    summary = RepeatSummary()
    logger.addFilter(summary)
    return summary


def finish(logger: logging.Logger, summary: RepeatSummary) -> None:
    """Remove the filter and log the summary lines (one per repeated kind)."""
    logger.removeFilter(summary)
    for line in summary.lines():
        logger.warning("%s", line)
