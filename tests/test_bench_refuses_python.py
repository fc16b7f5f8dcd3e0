"""The bench refuses to measure a C accelerator's Python fallback (a stale build is refused at load
with only a warning, and its figures would pass for the product's), and says what to do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: a machine whose fold build is missing or stale: importing aggregator.fold._fold raises ImportError
NO_FOLD = "import sys; sys.modules['aggregator.fold._fold'] = None\n"


def _run(tmp_path: Path, args: list[str], allow: bool = False) -> subprocess.CompletedProcess:
    (tmp_path / "sitecustomize.py").write_text(NO_FOLD)
    env = {k: v for k, v in os.environ.items() if k != "CARBONSPAN_BENCH_ALLOW_PYTHON"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO)])
    if allow:
        env["CARBONSPAN_BENCH_ALLOW_PYTHON"] = "1"
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)


def test_python_m_bench_refuses_and_names_the_fallback(tmp_path: Path) -> None:
    done = _run(tmp_path, ["-m", "bench", "no_such_bench"])
    assert done.returncode == 2, done
    assert "aggregate-fold" in done.stderr and "make venv" in done.stderr
    assert "otlp-protobuf" not in done.stderr.split("refusing")[1].split("are not")[0]
    assert "===" not in done.stdout  # nothing was measured


def test_one_bench_module_refuses_too(tmp_path: Path) -> None:
    done = _run(tmp_path, ["-m", "bench.bench_aggregate"])
    assert done.returncode == 2, done
    assert "refusing to measure" in done.stderr and "aggregate-fold" in done.stderr
    assert done.stdout == ""


def test_measuring_the_fallback_on_purpose_warns(tmp_path: Path) -> None:
    done = _run(tmp_path, ["-m", "bench", "no_such_bench"], allow=True)
    assert done.returncode == 2 and "no benchmark named no_such_bench" in done.stderr, done  # went on
    warning = next(x for x in done.stderr.splitlines() if "WARNING: measuring the pure-Python path" in x)
    assert "aggregate-fold" in warning


def test_with_every_accelerator_built_nothing_is_refused() -> None:
    from bench import python_fallbacks

    assert python_fallbacks() == []  # the test environment builds them all (make venv)


def test_the_build_check_stops_make_venv_on_a_missing_accelerator(tmp_path: Path) -> None:
    """``make venv`` runs ``python -m carbonspan.buildcheck`` after pip: a C extension that failed to
    compile (setup.py marks them optional) or a stale build stops it, naming which."""
    (tmp_path / "sitecustomize.py").write_text(NO_FOLD)
    env = {k: v for k, v in os.environ.items() if k != "CARBONSPAN_ALLOW_PYTHON"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO)])
    done = subprocess.run([sys.executable, "-m", "carbonspan.buildcheck"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "aggregate-fold" in done.stderr and "-v" in done.stderr, done
    env["CARBONSPAN_ALLOW_PYTHON"] = "1"
    done = subprocess.run([sys.executable, "-m", "carbonspan.buildcheck"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "WARNING" in done.stderr, done
    ok = subprocess.run([sys.executable, "-m", "carbonspan.buildcheck"], cwd=REPO,
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stderr == "", ok


def test_make_venv_runs_the_build_check() -> None:
    recipe = (REPO / "Makefile").read_text().split("$(STAMP):", 1)[1].split("\nvenv:", 1)[0]
    assert "-m carbonspan.buildcheck" in recipe and recipe.index("buildcheck") < recipe.index("touch")


def test_python_m_bench_refuses_what_it_cannot_run_and_runs_nothing() -> None:
    """An unknown name or a module's own option (``python -m bench ingest --help`` once ran the
    whole ingest bench, unlocked, for five minutes) is refused before anything is measured."""
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "bench", *args], cwd=REPO, capture_output=True,
                              text=True, timeout=60)
    helped = run("--help")
    assert helped.returncode == 0 and "ingest" in helped.stdout and "example:" in helped.stdout
    for args, says in ((("nosuch",), "no benchmark named nosuch"),
                       (("ingest", "--http-json"), "python -m bench.bench_ingest --http-json")):
        done = run(*args)
        assert done.returncode == 2 and says in done.stderr, done
        assert "===" not in done.stdout
