"""The time buckets of aggregate.series grow memory with services x buckets, never with lines.

Folds archives written by bench/bench_series_memory.py (contiguous runtime windows spread
over a daily period) under tracemalloc. Ten times the lines over the same services and days
keep the same state and about the same peak; four times the days (buckets) or the services
add state in proportion to the (service, bucket) cells they add. No timing is measured.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # bench/ is not installed (as in tests/daemon/conftest.py)
    sys.path.append(str(REPO))

from bench.bench_series_memory import measure, write_archive  # noqa: E402


def _case(tmp_path, name: str, services: int, days: int, windows: int) -> tuple[int, int, int]:
    root = tmp_path / name
    period = write_archive(root, services, days, windows)
    peak, kept, folded, buckets = measure(root, period)
    assert folded == windows and buckets == days  # every line folded; one bucket a day
    return peak, kept, services * buckets


def test_ten_times_the_lines_keep_the_same_series_state(tmp_path):
    small_peak, small_kept, cells = _case(tmp_path, "small", 10, 12, 600)
    large_peak, large_kept, _ = _case(tmp_path, "large", 10, 12, 6_000)
    # A state that kept a bucket (or anything) per line would grow ~10x; it stays flat.
    assert large_kept < 1.1 * small_kept + 2048, (small_kept, large_kept)
    assert large_peak < 1.5 * small_peak, (small_peak, large_peak)
    assert cells == 120


def test_state_grows_with_services_times_buckets(tmp_path):
    _, base, base_cells = _case(tmp_path, "base", 10, 12, 600)
    _, days4, days_cells = _case(tmp_path, "days", 10, 48, 600)  # x4 buckets, same lines
    _, svc4, svc_cells = _case(tmp_path, "services", 40, 12, 600)  # x4 services
    per_cell_days = (days4 - base) / (days_cells - base_cells)
    per_cell_services = (svc4 - base) / (svc_cells - base_cells)
    # each added (service, bucket) cell costs a small object and a dict entry (~100-200 B);
    # the services case also adds each service's own accumulator, spread over its 12 cells
    assert 40 < per_cell_days < 400, per_cell_days
    assert per_cell_days < per_cell_services < 4 * per_cell_days, (per_cell_days, per_cell_services)
