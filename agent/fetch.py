"""Fetch a time range of traces from a Jaeger or Tempo query API into files, for backfill.

Each answer is saved as the file it was (``<dir>/jaeger-<service>.json``,
``<dir>/tempo-<trace id>.json``), so the backfilled lines name the SHA-256 of files an auditor
can keep beside the archive, and the fetch and the scoring are separate, repeatable steps.

- **Jaeger** query service (``:16686``): ``GET /api/services`` (``{"data": [names]}``), then per
  service ``GET /api/traces?service=S&start=<µs>&end=<µs>&limit=N`` (``{"data": [traces]}``).
  A trace that reaches several services is answered for each of them: traces are kept once,
  by trace id (the first answer wins), so no span is counted twice.
- **Tempo** query frontend (``:3200``): ``GET /api/search?start=<s>&end=<s>&limit=N``
  (``{"traces": [{"traceID": ...}]}``), then ``GET /api/traces/<id>`` for each (``{"batches":
  [...]}``, OTLP resource spans).

Requests have a timeout; an HTTP error, a refused connection or an answer that is not the
documented JSON is a :class:`FetchError` naming the URL. ``limit`` caps what one search
returns: when an answer holds exactly ``limit`` traces, more may exist, and the caller is told
(``truncated``) rather than given a silently partial period.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TIMEOUT_S = 30.0
MAX_ANSWER_BYTES = 256 * 1024 * 1024
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


class FetchError(RuntimeError):
    """A query API could not be read; ``str(exc)`` names the URL and what went wrong."""


@dataclass
class Fetched:
    files: list[Path] = field(default_factory=list)
    traces: int = 0
    truncated: list[str] = field(default_factory=list)  # searches that returned `limit` traces


def _get(url: str) -> Any:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:  # noqa: S310 - user's URL
            body = answer.read(MAX_ANSWER_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise FetchError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise FetchError(f"{url}: cannot connect ({reason})") from None
    if len(body) > MAX_ANSWER_BYTES:
        raise FetchError(f"{url}: the answer is larger than {MAX_ANSWER_BYTES} bytes; "
                         "fetch a shorter time range")
    try:
        return json.loads(body)
    except ValueError as exc:
        raise FetchError(f"{url}: not JSON ({exc})") from None


def _save(directory: Path, name: str, doc: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{_SAFE.sub('_', name)}.json"
    path.write_text(json.dumps(doc, sort_keys=True))
    return path


def from_jaeger(base: str, start_s: float, end_s: float, directory: Path, limit: int) -> Fetched:
    base = base.rstrip("/")
    services = _get(f"{base}/api/services")
    names = services.get("data") if isinstance(services, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise FetchError(f"{base}/api/services: expected {{\"data\": [service names]}}")
    out, seen = Fetched(), set()
    for service in sorted(names):
        query = urllib.parse.urlencode({"service": service, "start": int(start_s * 1e6),
                                        "end": int(end_s * 1e6), "limit": limit})
        url = f"{base}/api/traces?{query}"
        answer = _get(url)
        traces = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(traces, list):
            raise FetchError(f"{url}: expected {{\"data\": [traces]}}")
        if len(traces) >= limit:
            out.truncated.append(url)
        fresh = [t for t in traces if isinstance(t, dict) and t.get("traceID") not in seen]
        seen.update(t.get("traceID") for t in fresh)
        if fresh:
            out.files.append(_save(directory, f"jaeger-{service}", {"data": fresh}))
            out.traces += len(fresh)
    return out


def from_tempo(base: str, start_s: float, end_s: float, directory: Path, limit: int) -> Fetched:
    base = base.rstrip("/")
    query = urllib.parse.urlencode({"start": int(start_s), "end": int(end_s), "limit": limit})
    url = f"{base}/api/search?{query}"
    found = _get(url)
    traces = found.get("traces") if isinstance(found, dict) else None
    if not isinstance(traces, list):
        raise FetchError(f"{url}: expected {{\"traces\": [...]}}")
    out = Fetched(truncated=[url] if len(traces) >= limit else [])
    ids = sorted({t["traceID"] for t in traces if isinstance(t, dict)
                  and isinstance(t.get("traceID"), str) and re.fullmatch(r"[0-9a-fA-F]{1,32}",
                                                                         t["traceID"])})
    for trace_id in ids:
        doc = _get(f"{base}/api/traces/{trace_id}")
        out.files.append(_save(directory, f"tempo-{trace_id}", doc))
        out.traces += 1
    return out
