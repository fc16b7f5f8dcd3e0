"""Errors of the energy and intensity sources.

Configuration mistakes are ``ConfigError`` (from ``agent.config``, so the daemon reports them
like any other bad key). Problems while polling are ``SourceError``: the poller counts them,
backs off and keeps the last good value; only an authentication failure seen at start is
fatal, because a wrong key or password never heals by retrying.
"""

from __future__ import annotations

from agent.config import ConfigError

__all__ = [
    "ConfigError",
    "SourceAuthError",
    "SourceError",
    "SourceHTTPError",
    "SourceNotFound",
    "SourceStartError",
]


class SourceError(Exception):
    """One poll of a source failed (unreachable, timeout, bad status, unreadable body)."""


class SourceAuthError(SourceError):
    """The endpoint refused our credentials (HTTP 401/403)."""


class SourceHTTPError(SourceError):
    """The endpoint answered another non-2xx status; ``body`` is the start of its answer
    (at most ``http.MAX_ERROR_BODY_BYTES``), for APIs that explain errors in the body."""

    def __init__(self, message: str, status: int, body: bytes = b"") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class SourceNotFound(SourceError):
    """The endpoint answered HTTP 404: the resource is not there (a source may look elsewhere)."""


class SourceStartError(ConfigError):
    """A source cannot run with this configuration; the message names the source."""
