"""A small hardened HTTP/1.1 server that takes a request handler (asyncio + httptools).

Used by the agent's OTLP/HTTP port and meant for any other carbonspan service that listens on
HTTP: the application says where a request runs (``route``), may refuse it from its head
(``check``), answers it whole (``handle``) and words the server's own refusals (``refuse``);
the server owns the connection limits, deadlines, evictions and body budget (``Limits``), so
no application repeats them. See docs/operations.md, "HTTP connections".

    server = HttpServer(app, Limits(max_body_bytes=1 << 20), "127.0.0.1", 0)
    port = server.start()
    ...
    server.stop()
"""

from httpserve.host import App, Host
from httpserve.message import Head, Later, Limits, Request, Response, Route
from httpserve.server import HttpServer, TlsError, load_tls_context

__all__ = ["App", "Head", "Host", "HttpServer", "Later", "Limits", "Request", "Response", "Route", "TlsError",
           "load_tls_context"]
