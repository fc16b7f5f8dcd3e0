"""A small, bounded HTTP GET for pollers: total deadline, size cap, basic auth, CA bundle.

Pollers run off the scoring path, but a hung endpoint must still not hang a poller: the
socket timeout bounds each blocking call and a deadline bounds the whole exchange, so a
server that trickles one byte a second fails in ``timeout_s`` too. The standard library is
enough here (one GET per interval), and keeps the agent free of another HTTP stack.
"""

from __future__ import annotations

import base64
import http.client
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping

from agent.sources.errors import SourceAuthError, SourceError, SourceHTTPError, SourceNotFound

MAX_BODY_BYTES = 64 * 1024 * 1024  # Kepler with per-process metrics on a big node is tens of MB
MAX_ERROR_BODY_BYTES = 64 * 1024  # of an error answer, kept for APIs that explain errors in it
_CHUNK = 64 * 1024


def tls_context(ca_file: str | None = None, verify: bool = True) -> ssl.SSLContext:
    """A client TLS context trusting ``ca_file`` (or the system store); ``verify=False`` opts out."""
    ctx = ssl.create_default_context(cafile=ca_file)
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def basic_auth(username: str, password: str) -> str:
    """The ``Authorization`` header value for HTTP basic auth."""
    token = base64.b64encode(f"{username}:{password}".encode()).decode("ascii")
    return f"Basic {token}"


def http_get(
    url: str,
    *,
    timeout_s: float,
    headers: Mapping[str, str] | None = None,
    context: ssl.SSLContext | None = None,
    max_bytes: int = MAX_BODY_BYTES,
) -> bytes:
    """GET ``url`` and return the body of a 2xx answer, or raise ``SourceError``.

    401 and 403 raise ``SourceAuthError`` (credentials are wrong: retrying will not help);
    404 raises ``SourceNotFound``; any other status ``SourceHTTPError`` with the start of the
    answer's body (ENTSO-E explains a refused query in an XML document sent with HTTP 400).
    """
    deadline = time.monotonic() + timeout_s
    request = urllib.request.Request(url, headers=dict(headers or {}), method="GET")
    opener = urllib.request.build_opener(
        urllib.request.HTTPSHandler(context=context), _KeepCredentialsHome()
    )
    try:
        with opener.open(request, timeout=timeout_s) as resp:
            return _read_bounded(resp, url, deadline, max_bytes)
    except urllib.error.HTTPError as exc:
        body = _error_body(exc)
        detail = _snippet(body)
        if exc.code in (401, 403):
            raise SourceAuthError(
                f"GET {url} was refused with HTTP {exc.code}{detail}: check the credentials"
            ) from None
        if exc.code == 404:
            raise SourceNotFound(f"GET {url} answered HTTP 404{detail}") from None
        raise SourceHTTPError(f"GET {url} answered HTTP {exc.code}{detail}", exc.code, body) from None
    except urllib.error.URLError as exc:
        raise SourceError(f"GET {url} failed: {exc.reason}") from None
    except (TimeoutError, OSError, http.client.HTTPException) as exc:
        raise SourceError(f"GET {url} failed: {type(exc).__name__}: {exc or 'timed out'}") from None


_CREDENTIAL_HEADERS = ("authorization", "auth-token")


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


class _KeepCredentialsHome(urllib.request.HTTPRedirectHandler):
    """Follow redirects, except one that would carry our credentials to another origin.

    urllib copies every request header into the redirected request, so a BMC or API answering
    302 to another host (or from https to http) would be sent the password or API key.
    """

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        sends_credentials = any(req.has_header(h.capitalize()) for h in _CREDENTIAL_HEADERS)
        if sends_credentials and _origin(newurl) != _origin(req.full_url):
            raise SourceError(
                f"GET {req.full_url} was redirected (HTTP {code}) to {newurl}, another origin; "
                "credentials are not sent there: set the source's url to the final address"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _read_bounded(
    resp: http.client.HTTPResponse, url: str, deadline: float, max_bytes: int
) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise SourceError(f"GET {url} timed out while reading the body")
        chunk = resp.read1(_CHUNK)
        if not chunk:
            return b"".join(parts)
        size += len(chunk)
        if size > max_bytes:
            raise SourceError(f"GET {url}: body is larger than {max_bytes} bytes")
        parts.append(chunk)


def _error_body(exc: urllib.error.HTTPError) -> bytes:
    try:
        return exc.read(MAX_ERROR_BODY_BYTES) or b""
    except Exception:  # the error body is a courtesy; never let it mask the status
        return b""


def _snippet(body: bytes) -> str:
    text = body[:200].decode("utf-8", "replace").strip()
    return f" ({text})" if text else ""
