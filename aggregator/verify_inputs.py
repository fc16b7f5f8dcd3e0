"""Which archive file a report lists is decided by content, not by name (issue 12 item 11).

Rotation renames files after a report is written: ``windows-…-000003.jsonl`` becomes
``….jsonl.gz`` once compressed, logrotate turns ``x.jsonl.1`` into ``x.jsonl.2``. The lines are
the same, so re-deriving the report must give the same report. Every file in
``inputs.files`` carries the hashes of its first and last line (``first_hash``,
``last_hash``), which no rename changes and which the hash chain makes unique per agent.
Before comparing, the re-derived report takes the name the checked report gives the file of
the same (agent, first_hash, last_hash), in ``inputs.files``, ``inputs.fallback_files``,
``inputs.one_sided_files`` and ``inputs.malformed_samples``; each rename is returned so ``verify`` can print it.
"""

from __future__ import annotations

import copy
from typing import Any


def _identity(entry: Any) -> tuple[str, str, str] | None:
    if not isinstance(entry, dict):
        return None
    key = (entry.get("agent"), entry.get("first_hash"), entry.get("last_hash"))
    return key if all(isinstance(k, str) and k for k in key) else None  # type: ignore[return-value]


def _relabel(label: str, renames: dict[str, str]) -> str:
    """``agent/file`` or ``agent/file:line: reason`` with the file renamed."""
    head, sep, tail = label.partition(":")
    return renames[head] + sep + tail if head in renames else label


def named_as_stated(fresh: dict[str, Any], stated: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``fresh`` (a re-derived report, as JSON) with each file named as ``stated`` names the
    file of the same content, and one line per rename saying so."""
    names = {}
    for entry in ((stated.get("inputs") or {}).get("files") or []) if isinstance(stated.get("inputs"), dict) else []:
        key = _identity(entry)
        if key is not None and isinstance(entry.get("file"), str):
            names[key] = entry["file"]
    renames: dict[str, str] = {}
    out = copy.deepcopy(fresh)
    for entry in out["inputs"]["files"]:
        name = names.get(_identity(entry))  # type: ignore[arg-type]
        if name is not None and name != entry["file"]:
            renames[f"{entry['agent']}/{entry['file']}"] = f"{entry['agent']}/{name}"
            entry["file"] = name
    if renames:
        inputs = out["inputs"]
        inputs["fallback_files"] = [_relabel(x, renames) for x in inputs["fallback_files"]]
        inputs["one_sided_files"] = [_relabel(x, renames) for x in inputs.get("one_sided_files", [])]
        inputs["malformed_samples"] = [_relabel(x, renames) for x in inputs["malformed_samples"]]
    return out, [f"{now} is the report's {then} (same first and last line hashes)" for now, then in renames.items()]
