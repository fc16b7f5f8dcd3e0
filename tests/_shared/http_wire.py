"""HTTP/1.1 on a plain socket, as the httpserve tests speak it: requests written out byte by
byte, answers read back whole (each with a Content-Length)."""

from __future__ import annotations

import socket


def post(path: str, body: bytes, extra: bytes = b"") -> bytes:
    """A POST of ``body`` to ``path`` with its Content-Length (``extra``: more header lines)."""
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n" % (path.encode(), len(body))
            + extra + b"\r\n" + body)


def read_answers(s: socket.socket, n: int) -> list[tuple[bytes, bytes]]:
    """The next ``n`` answers on ``s``, each as (head without its blank line, body); a close
    before they are whole fails the test."""
    buf, out = b"", []
    while len(out) < n:
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            assert chunk, f"closed after {out!r} + {buf!r}"
            buf += chunk
        head, rest = buf.split(b"\r\n\r\n", 1)
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length")))
        while len(rest) < length:
            chunk = s.recv(65536)
            assert chunk, f"closed mid-answer after {out!r}"
            rest += chunk
        out.append((head, rest[:length]))
        buf = rest[length:]
    return out
