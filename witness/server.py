"""The witness's HTTP service: ``POST /add-checkpoint``, ``GET /latest/<origin>``, ``/healthz``.

Hardened like the agent's OTLP/HTTP port: at most ``max_connections`` connections are served
at once (one thread each; past the cap a connection gets 503 + ``Retry-After`` from a
short-lived thread, past twice the cap it is closed at once); every connection has a socket
deadline (``timeout_s``: a slow or idle client is dropped, never holds a thread); a body must
declare its ``Content-Length`` (411 otherwise) and at most ``max_body_bytes`` (413, checked
before reading). Refusals are counted in ``/healthz``'s answer (``refused`` by reason).
"""

from __future__ import annotations

import logging
import threading
import urllib.parse
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from witness.state import Answer, Witness

log = logging.getLogger("carbonspan.witness")
MAX_BODY_BYTES = 64 * 1024  # an old line, 63 proof lines and a note with 64 signatures fit


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    witness: Witness
    timeout_s: float
    max_body: int
    slots: threading.BoundedSemaphore
    spare: threading.BoundedSemaphore
    refused: Counter[str]

    def process_request(self, request: Any, client_address: Any) -> None:
        if self.slots.acquire(blocking=False):
            return super().process_request(request, client_address)
        self.refused["connections"] += 1
        if self.spare.acquire(blocking=False):
            threading.Thread(target=self._busy, args=(request, client_address), daemon=True).start()
        else:
            self.shutdown_request(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def _busy(self, request: Any, client_address: Any) -> None:
        try:
            request.settimeout(2.0)
            _Busy(request, client_address, self)
        except OSError:
            pass
        finally:
            self.shutdown_request(request)
            self.spare.release()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        self.timeout = self.server.timeout_s  # StreamRequestHandler applies it to the socket
        super().setup()

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("%s " + fmt, self.address_string(), *args)

    def _send(self, a: Answer, extra: dict[str, str] | None = None) -> None:
        data = a.body.encode()
        self.send_response(a.status)
        self.send_header("Content-Type", a.content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        if self.path.rstrip("/") != "/add-checkpoint":
            return self._send(Answer(404, "POST /add-checkpoint is the only write API\n"))
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            self.server.refused["no_length"] += 1
            return self._send(Answer(411, "send Content-Length\n"))
        if int(length) > self.server.max_body:
            self.close_connection = True  # the body is not read
            self.server.refused["too_large"] += 1
            return self._send(Answer(413, f"body over {self.server.max_body} bytes\n"))
        answer = self.server.witness.add_checkpoint(self.rfile.read(int(length)))
        if answer.status != 200:
            self.server.refused[str(answer.status)] += 1
            log.info("refused a checkpoint: %d %s", answer.status, answer.body.strip()[:200])
        self._send(answer)

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        if self.path == "/healthz":
            counts = ", ".join(f"{k}={v}" for k, v in sorted(self.server.refused.items()))
            return self._send(Answer(200, f"ok; refused: {counts or 'none'}\n"))
        if self.path.startswith("/latest/"):
            origin = urllib.parse.unquote(self.path[len("/latest/"):])
            with self.server.witness.lock:
                found = self.server.witness.latest.get(origin)
            if found is None:
                return self._send(Answer(404, f"no checkpoint cosigned for {origin!r}\n"))
            return self._send(Answer(200, found[1]))
        self._send(Answer(404, "GET /latest/<origin> or /healthz\n"))


class _Busy(_Handler):
    def handle_one_request(self) -> None:
        self.raw_requestline = self.rfile.readline(65537)
        self.request_version, self.command, self.requestline = "HTTP/1.1", "", ""
        self.close_connection = True
        self._send(Answer(503, "too many connections; retry\n"), {"Retry-After": "1",
                                                                 "Connection": "close"})


class WitnessServer:
    def __init__(self, witness: Witness, bind: str, port: int, *, max_connections: int = 64,
                 timeout_s: float = 10.0, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.httpd = _Server((bind, port), _Handler)
        self.httpd.witness, self.httpd.timeout_s = witness, timeout_s
        self.httpd.max_body = max_body_bytes
        self.httpd.slots = threading.BoundedSemaphore(max_connections)
        self.httpd.spare = threading.BoundedSemaphore(max_connections)
        self.httpd.refused = Counter()
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="witness-http",
                                        daemon=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
