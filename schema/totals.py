"""The terms of a carbon total, decided once (docs/carbon-model.md §5, docs/archive-format.md).

A window's ``co2.total.mid`` and a report's ``total_carbon_kgco2eq`` are the sum of the same
four terms, in this order:

    total = operational + embodied + database + messaging

- ``operational``: the application spans' electricity (energy x intensity x PUE), the only
  term carried per service;
- ``embodied``: making the hardware, charged per request (SCI's M);
- ``database``, ``messaging``: the database and broker hosts counted in totals (``[[green.hosts]]``).

Each term has one name with a unit suffix everywhere: ``co2.<term>_gco2`` on a window line,
``<term>_kg`` in the aggregator's state, ``carbon_breakdown.<term>_kgco2eq`` in a report. The
sum runs left to right in :data:`TOTAL_TERMS` order (:func:`carbon_total`), so the agent, the
aggregator's report and ``verify`` get the same float. Location-based Scope 2 (GHG Protocol
Scope 2 Guidance, 2015) is the electricity in it, :data:`SCOPE2_TERMS`: every term but the
embodied one, which is the supply chain's (Scope 3). The SCI numerator is
:data:`SCI_TERMS`, the application's electricity and its share of making the hardware.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The terms of a carbon total, in summing order.
TOTAL_TERMS: tuple[str, ...] = ("operational", "embodied", "database", "messaging")
#: The terms no service carries: added on top of the services' operational carbon.
UNATTRIBUTED_TERMS: tuple[str, ...] = TOTAL_TERMS[1:]
#: The terms of the database and broker hosts counted in totals (a report's host carbon).
HOST_TERMS: tuple[str, ...] = ("database", "messaging")
#: The terms of the Software Carbon Intensity's numerator, (E x I) + M (schema.constants.SCI_FORMULA).
SCI_TERMS: tuple[str, ...] = ("operational", "embodied")
#: The terms that are electricity: the location-based Scope 2 figure.
SCOPE2_TERMS: tuple[str, ...] = tuple(t for t in TOTAL_TERMS if t != "embodied")


def carbon_total(*terms: float) -> float:
    """The total of one value per term of :data:`TOTAL_TERMS`, given in that order, summed
    left to right. Refuses any other number of terms (TypeError), so a term added to the
    contract cannot be left out of a total silently."""
    if len(terms) != len(TOTAL_TERMS):
        raise TypeError(f"carbon_total takes {len(TOTAL_TERMS)} terms {TOTAL_TERMS}, got {len(terms)}")
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    return total


def less_unattributed(total: float, *unattributed: float) -> float:
    """What a total leaves once the terms no service carries are taken off: ``total`` less one
    value per term of :data:`UNATTRIBUTED_TERMS`, given in that order, subtracted left to right
    (a proxy window's application carbon: mid - embodied - database - messaging). Refuses any
    other number of terms (TypeError)."""
    if len(unattributed) != len(UNATTRIBUTED_TERMS):
        raise TypeError(f"less_unattributed takes {len(UNATTRIBUTED_TERMS)} terms {UNATTRIBUTED_TERMS}, "
                        f"got {len(unattributed)}")
    for value in unattributed:
        total = total - value
    return total


def terms_of(obj: Any, suffix: str, names: tuple[str, ...] = TOTAL_TERMS) -> tuple[float, ...]:
    """The values of ``obj``'s attributes ``<term><suffix>`` for the terms in ``names``, e.g.
    ``terms_of(state, "_kg")`` or ``terms_of(breakdown, "_kgco2eq")``."""
    return tuple(getattr(obj, term + suffix) for term in names)


def total_of(obj: Any, suffix: str) -> float:
    """The carbon total of ``obj``'s attributes ``<term><suffix>``."""
    return carbon_total(*terms_of(obj, suffix))


def sum_of(obj: Any, suffix: str, names: tuple[str, ...]) -> float:
    """The sum of ``obj``'s attributes ``<term><suffix>`` over ``names`` (e.g.
    :data:`UNATTRIBUTED_TERMS`), left to right."""
    values = terms_of(obj, suffix, names)
    total = values[0]
    for value in values[1:]:
        total = total + value
    return total


def scope2_of(obj: Any, suffix: str) -> float:
    """The location-based Scope 2 carbon of ``obj``'s attributes ``<term><suffix>``."""
    return sum_of(obj, suffix, SCOPE2_TERMS)


def line_terms(co2: Mapping[str, Any]) -> list[Any]:
    """The terms as a window line's ``green_summary.co2`` object holds them (``<term>_gco2``;
    a missing one is 0, as on lines written before it existed). Values are as read: the
    caller checks they are numbers."""
    return [co2.get(term + "_gco2", 0.0) for term in TOTAL_TERMS]
