"""The witness's HTTP service on ``httpserve`` (the agent's own hardened HTTP layer):
``POST /add-checkpoint``, ``GET /latest/<origin>``, ``GET /healthz``.

``httpserve`` owns the hardening, exactly as for the agent's OTLP/HTTP port: at most
``max_connections`` connections (the longest-idle, then the slowest, is evicted for a new one),
one deadline (``timeout_s``) for each request's head and body and for an idle keep-alive, a
body over ``MAX_BODY_BYTES`` refused from its declared length before it is read, WORK requests
(``add-checkpoint``) in a bounded pool that refuses past it (503 + ``Retry-After``). ``/healthz``
is answered on the event loop, whatever the load. Refusals are counted and shown by /healthz.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections import Counter

from httpserve import Head, HttpServer, Limits, Request, Response, Route
from witness.state import Answer, Witness

log = logging.getLogger("carbonspan.witness")
MAX_BODY_BYTES = 64 * 1024  # an old line, 63 proof lines and a note with 64 signatures fit
_TEXT = "text/plain; charset=utf-8"


class WitnessApp:
    """The witness's routes (see ``httpserve.App``)."""

    def __init__(self, witness: Witness) -> None:
        self.witness = witness
        self.refused: Counter[str] = Counter()

    def route(self, head: Head) -> Route:
        if head.method == "POST":
            return Route.WORK
        return Route.INLINE if head.path == "/healthz" else Route.CONTROL

    def check(self, head: Head) -> Response | None:
        if head.path.rstrip("/") != "/add-checkpoint":
            return self._answer(Answer(404, "POST /add-checkpoint is the only write API\n"))
        if "content-length" not in head.headers and not head.chunked:
            self.refused["no_length"] += 1
            return Response(411, b"send Content-Length\n", _TEXT, close=True)
        return None

    def handle(self, request: Request) -> Response:
        head = request.head
        if head.method == "POST":
            answer = self.witness.add_checkpoint(bytes(request.body))
            if answer.status != 200:
                self.refused[str(answer.status)] += 1
                log.info("refused a checkpoint: %d %s", answer.status, answer.body.strip()[:200])
            return self._answer(answer)
        if head.path == "/healthz":
            counts = ", ".join(f"{k}={v}" for k, v in sorted(self.refused.items()))
            return self._answer(Answer(200, f"ok; refused: {counts or 'none'}\n"))
        if head.method == "GET" and head.path.startswith("/latest/"):
            origin = urllib.parse.unquote(head.path[len("/latest/"):])
            with self.witness.lock:
                found = self.witness.latest.get(origin)
            if found is None:
                return self._answer(Answer(404, f"no checkpoint cosigned for {origin!r}\n"))
            return self._answer(Answer(200, found[1]))
        return self._answer(Answer(404, "POST /add-checkpoint, GET /latest/<origin> or /healthz\n"))

    def refuse(self, head: Head | None, status: int, kind: str, message: str) -> Response:
        self.refused[kind] += 1
        extra = (("Retry-After", "1"),) if kind == "busy" else ()
        return Response(status, f"{message}\n".encode(), _TEXT, extra)

    @staticmethod
    def _answer(a: Answer) -> Response:
        return Response(a.status, a.body.encode(), a.content_type)


class WitnessServer:
    def __init__(self, witness: Witness, bind: str, port: int, *, max_connections: int = 64,
                 timeout_s: float = 10.0, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = WitnessApp(witness)
        limits = Limits(max_connections=max_connections, request_timeout_s=timeout_s,
                        idle_timeout_s=timeout_s, max_body_bytes=max_body_bytes,
                        body_budget_bytes=max(64 * max_body_bytes, 4 << 20), workers=8)
        self.httpd = HttpServer(self.app, limits, bind, port, name="witness-http")
        self.port = self.httpd.port

    def start(self) -> None:
        self.httpd.start()

    def stop(self) -> None:
        self.httpd.stop()
