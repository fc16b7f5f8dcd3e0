"""Hand mutation check for the placement evaluator and gate (not collected by pytest).

    .venv/bin/python tests/placement/mutants.py [-j N]

Copies the working tree to a temporary directory (so the shared checkout is never touched),
applies each mutation below on its own, runs ``tests/placement`` against the copy
(``PYTHONPATH`` puts the copy ahead of the editable install) and reports which mutations the
tests caught. Each mutation must match its source text exactly once, so a stale entry fails
loudly instead of silently "surviving". ``-j N`` works in N copies at once (mutation i goes
to copy i mod N); the report is printed in the list's order either way.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: fast in-process tests first, so a caught mutant stops early (-x); the property tests and
#: the CLI tests (subprocesses) last
FILES = [f"tests/placement/test_{n}.py" for n in
         ("decision", "gate", "identity", "probe", "plugins_audit", "docs", "model", "sanitisers",
          "real_traces", "cli")]

#: (file, original text, mutated text, what it breaks)
MUTATIONS: list[tuple[str, str, str, str]] = [
    ("placement/evaluate.py", "trace.energy_kwh / d * (p[r, t + d] - p[r, t])",
     "trace.energy_kwh / d * (p[r, t + d - 1] - p[r, t])", "window sum one hour short"),
    ("placement/evaluate.py", "base = np.maximum(s - day, 0)", "base = np.maximum(s - day + 1, 0)",
     "persistence forecast reads the submit hour (the future)"),
    ("placement/evaluate.py", "THRESHOLD_PERCENTILE = 30.0", "THRESHOLD_PERCENTILE = 50.0",
     "threshold-shift uses the median"),
    ("placement/evaluate.py", "ok = (mean <= thresholds[h])", "ok = (mean < thresholds[h])",
     "threshold-shift comparison strict"),
    ("placement/evaluate.py", "return Placement(np.argmin(masked, axis=1)",
     "return Placement(np.argmax(np.where(trace.allowed, mean[None, :], -np.inf), axis=1)",
     "lowest-average picks the highest average"),
    ("placement/evaluate.py", "valid = (k[None, :] <= slack)[:, :, None] & trace.allowed[sl, None, :]",
     "valid = (k[None, :] <= slack)[:, :, None] | trace.allowed[sl, None, :]",
     "oracle/forecast ignore disallowed regions"),
    ("placement/evaluate.py", "young = trace.submit < day", "young = trace.submit < 0",
     "forecast-greedy forecasts without history"),
    ("placement/decision.py", "if delta >= as_written(m):", "if delta > as_written(m):",
     "margin exclusive"),
    ("placement/decision.py", "if red[ships] < as_written(r):",
     "if red[candidate] < as_written(r):", "retirement tests the candidate"),
    ("placement/decision.py", "best = max(SIMPLE_BASELINES", "best = min(SIMPLE_BASELINES",
     "worse simple baseline chosen"),
    ("placement/gate.py", 'if not isinstance(trace, dict) or trace.get("synthetic") is not False:',
     "if not isinstance(trace, dict):", "synthetic evaluations gate"),
    ("placement/gate.py", "printed(age) > as_written(settings.retest_days)",
     "printed(age) > 2 * as_written(settings.retest_days)",
     "re-test cadence doubled"),
    ("placement/gate.py", 'self.inner.score([{**c, "carbon_intensity": same} for c in clusters], job)',
     "self.inner.score([dict(c) for c in clusters], job)", "withholding does not neutralise"),
    ("placement/probe.py", "    return not bool(same.all())", "    return False",
     "probe never sees carbon"),
    ("placement/gate.py", "    if name in CARBON_FIRST:\n        return Decision(SIMPLE, REPLACED",
     "    if name not in CARBON_FIRST:\n        return Decision(SIMPLE, REPLACED",
     "fallback swaps replace/withhold"),
    ("placement/gate.py", 'if verdict.get("action") != SHIP_CANDIDATE or verdict.get("ships") != name:',
     'if verdict.get("action") not in (SHIP_CANDIDATE, RETIRE) or verdict.get("ships") != name:',
     "a policy's own retirement, once lifted, licenses it"),
    ("placement/gate.py", 'if verdict.get("action") != SHIP_CANDIDATE or verdict.get("ships") != name:',
     'if verdict.get("action") == RETIRE:', "baseline-won evidence licenses"),
    ("placement/audit.py", "    if findings:\n        return LogState",
     "    if False:\n        return LogState", "broken chain trusted (not fail-closed)"),
    ("placement/providers.py", "key = np.where(np.isnan(x), np.inf, x)",
     "key = np.where(np.isnan(x), -np.inf, x)", "unknown intensity ranks first"),
    ("placement/providers.py", 'return [float(c["capacity"]) - float(c["used"]) >= size for c in clusters]',
     'return [float(c["capacity"]) - float(c["used"]) > size for c in clusters]',
     "a cluster with exactly enough room does not fit"),
    ("placement/providers.py", 'return lexicographic(f["carbon_intensity"], -f["headroom"])',
     'return lexicographic(f["carbon_intensity"], f["headroom"])',
     "carbon-simple breaks ties toward the fullest cluster"),
    ("placement/decision.py", "delta = red[candidate] - red[best]", "delta = red[best] - red[candidate]",
     "delta sign flipped"),
    ("placement/evaluate.py", "ci = trace.intensity[:, trace.submit[rows]].T",
     "ci = trace.intensity[:, trace.submit[rows] + 1].T", "live provider sees the next hour"),
    ("placement/trace.py", "if end > hours:", "if end > hours + 1:", "window past the trace accepted"),
    ("placement/evaluate.py", "young = trace.submit < day", "young = trace.submit < day - 1",
     "forecast-greedy forecasts with 23 h of history (reads the submit hour)"),
    ("placement/evaluate.py", "cols = np.flatnonzero(allowed[i])", "cols = np.arange(allowed.shape[1])",
     "a third-party provider is offered disallowed regions"),
    ("placement/evaluate.py", "np.percentile(trace.intensity, THRESHOLD_PERCENTILE, axis=1)",
     'np.percentile(trace.intensity, THRESHOLD_PERCENTILE, axis=1, method="higher")',
     "threshold-shift percentile not linearly interpolated"),
    ("placement/audit.py", "wrong = _malformed(ev)", "wrong = None",
     "a malformed evaluation event is trusted"),
    ("placement/place.py", "math.isfinite(float(v)) and v >= 0", "math.isfinite(float(v))",
     "a negative job size is accepted"),
    ("placement/trace.py", "if len(set(lengths.values())) > 1:", "if False:",
     "ragged region arrays not named"),
    ("placement/trace.py", '{k: v for k, v in doc.items() if k != "synthetic"}', "dict(doc)",
     "the trace digest covers the synthetic flag (unflagged sample counts as real)"),
    ("placement/gate.py", 'return trace.get("digest") == sample_digest()', "return False",
     "the gate trusts an event citing the sample digest as real"),
    ("placement/trace.py", "regs = list(names) if regs is None else regs", "regs = regs or list(names)",
     "an empty 'regions' list silently means every region"),
    ("placement/providers.py", "        except Exception as exc:  # a plugin's bug",
     "        except ArithmeticError as exc:  # a plugin's bug", "a plugin's exception escapes unexplained"),
    ("placement/evaluate.py", "laps = (b // day - a // day)", "laps = ((b - 1) // day - a // day)",
     "persistence forecast drops a day that ends exactly on the window's end"),
    ("placement/decision.py", "or value < 0 or (positive", "or (positive",
     "a negative margin is accepted"),
    ("placement/place.py", 'if mode == "warn" and d.action != AS_REQUESTED:',
     'if False and mode == "warn" and d.action != AS_REQUESTED:', "warn mode enforces"),
    ("placement/gate.py", "if age < -1.0:", "if age < -1e9:", "future-dated evidence licenses"),
    ("placement/evaluate.py", "return Placement(trace.home.copy(), start)",
     "return Placement(np.zeros_like(trace.home), start)", "threshold-shift leaves the home region"),
    ("placement/audit.py", '("delta_pp", number(ev.get("delta_pp"))),', '("delta_pp", True),',
     "a non-numeric delta in an event is trusted"),
    # issue 13, item 1: evidence belongs to the policy that was measured
    ("placement/gate.py", "same = [r for r in mine if identity is not None and same_policy(",
     "same = [r for r in mine if True or same_policy(",
     "an evaluation of another identity (same name) licenses"),
    ("placement/identity.py", '"name": name, "goal": goal,', '"name": name, "goal": "any",',
     "a formula's identity ignores minimize/maximize"),
    ("placement/identity.py", '"version": None if dist is None else str(dist.version),',
     '"version": None,', "a plugin's identity ignores its version"),
    ("placement/providers.py", "code_digest(type(self), ArrayProvider,", "code_digest(ArrayProvider,",
     "a built-in's code version ignores its own code"),
    ("placement/audit.py", 'and isinstance(ev["policy_identity"].get("digest"), str | None))),',
     "or True)),", "a malformed policy identity is trusted"),
    # item 2: retirement is capability-wide
    ("placement/gate.py", "    if retired is not None:\n        return _retired(name, retired)",
     "    if retired is not None and name == SIMPLE:\n        return _retired(name, retired)",
     "a policy's own win outlives a retirement"),
    ("placement/gate.py", "latest = max(dated, key=lambda t: (t[0], t[1]))[2]",
     "latest = max(dated, key=lambda t: t[1])[2]",
     "a back-dated win appended after a retirement lifts it (log order, not measurement date)"),
    ("placement/gate.py", "             if ret or _age_days(r, now) >= -1.0]", "             if True]",
     "a future-dated win lifts a retirement"),
    # item 3: the probe cannot be dodged
    ("placement/probe.py", "*range(100, 2001, 25), 2250, 2500, 5000, 10000}", "*range(100, 1001, 25)}",
     "the probe stops at 1000 g"),
    ("placement/probe.py", "    if clusters:  # first,", "    if False:  # first,",
     "the probe ignores the real clusters' own values"),
    ("placement/probe.py", '(("eu-west-1a", "IE")', '(("probe", "probe")',
     "the probe's clusters announce a probe"),
    ("placement/probe.py", "same = (scores == first) |", "same = (scores == scores[:, :1]) |",
     "the probe compares clusters with each other, not with themselves"),
    # item 4: margins and retirement decided as printed
    ("placement/decision.py", 'red = {n: printed(float(v["reduction_pct"]))',
     'red = {n: Decimal(float(v["reduction_pct"]))', "the margin is decided on raw floats"),
    ("placement/decision.py", "if delta >= as_written(m):", "if delta >= Decimal(m):",
     "the margin is decided on its binary value, not as written"),
    ("placement/decision.py", "if red[ships] < as_written(r):",
     'if Decimal(policies[ships]["reduction_pct"]) < as_written(r):',
     "retirement is decided on the raw reduction"),
    ("placement/decision.py", "text = repr(float(x))", 'text = f"{float(x):g}"',
     "a setting is printed rounded (the reason contradicts the decision)"),
]


def run_one(tree: Path, rel: str, old: str, new: str) -> bool:
    """Apply one mutation in ``tree``, run the tests, restore. True if the tests failed."""
    path = tree / rel
    original = path.read_text()
    if original.count(old) != 1:
        raise SystemExit(f"mutation source not found exactly once in {rel}: {old!r}")
    path.write_text(original.replace(old, new))
    try:
        return tests_fail(tree)
    finally:
        path.write_text(original)


def tests_fail(tree: Path, show: bool = False) -> bool:
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *FILES],
        cwd=tree, env=env, capture_output=True, text=True, timeout=600,
    )
    if show and proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-2000:], sep="\n", file=sys.stderr)
    return proc.returncode != 0


def _copy(tmp: str, k: int) -> Path:
    tree = Path(tmp) / f"tree{k}"
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__",
                                                              ".hypothesis", "archives"))
    return tree


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-j", "--jobs", type=int, default=1, help="copies to work in at once (default 1)")
    jobs = max(1, ap.parse_args().jobs)
    with tempfile.TemporaryDirectory(prefix="cs-mutants-") as tmp:
        trees = [_copy(tmp, k) for k in range(jobs)]
        for rel, old, _, _ in MUTATIONS:  # a stale entry stops the run before any test runs
            if (trees[0] / rel).read_text().count(old) != 1:
                raise SystemExit(f"mutation source not found exactly once in {rel}: {old!r}")
        if tests_fail(trees[0], show=True):
            raise SystemExit("tests/placement fails on the unmutated copy; fix that first")
        results: dict[int, bool] = {}

        def worker(k: int) -> None:
            for i in range(k, len(MUTATIONS), jobs):
                rel, old, new, _ = MUTATIONS[i]
                results[i] = run_one(trees[k], rel, old, new)

        with ThreadPoolExecutor(jobs) as pool:
            for f in [pool.submit(worker, k) for k in range(jobs)]:
                f.result()
        for i, (rel, _, _, what) in enumerate(MUTATIONS):
            print(f"{i + 1:2d}. {'caught  ' if results[i] else 'SURVIVED'} {rel}: {what}")
        print(f"caught {sum(results.values())} of {len(MUTATIONS)} mutations")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
