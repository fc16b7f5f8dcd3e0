"""Counts in the terminal summary agree with their noun: "1 request", "1 window", "2 windows"."""

from __future__ import annotations

from aggregator.render import plural


def test_one_is_singular_and_every_other_count_plural_with_separators() -> None:
    assert plural(1, "request") == "1 request"
    assert plural(0, "request") == "0 requests"
    assert plural(1675, "request") == "1,675 requests"
    assert plural(1, "window") == "1 window"
