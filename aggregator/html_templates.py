"""The Jinja2 environment of the HTML report: templates shipped in ``aggregator/templates/``.

Loaded from the package itself (``PackageLoader``: the installed files, never the network), with
autoescape on for every template, so each value from the report (service names, regions and
agents are untrusted archive input) is HTML-escaped where it is put; only the renderers' own
pieces (another template's output, the CSS-escaped footer rule) go in as ``Markup``. Undefined
names fail (``StrictUndefined``) rather than print as nothing. The same report gives the same
bytes: the templates hold no clock and no random value.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

__all__ = ["Markup", "macro", "render"]


@cache
def environment() -> Environment:
    return Environment(loader=PackageLoader("aggregator", "templates"), autoescape=True, trim_blocks=True,
                       lstrip_blocks=True, keep_trailing_newline=True, undefined=StrictUndefined)


def render(name: str, **context: Any) -> Markup:
    """The template ``name`` filled with ``context`` (safe to put in another template as it is)."""
    return Markup(environment().get_template(name).render(**context))


def macro(name: str) -> Any:
    """A macro of ``macros.html`` as a function returning ``Markup``."""
    return getattr(environment().get_template("macros.html").module, name)
