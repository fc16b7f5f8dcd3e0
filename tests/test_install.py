"""A normal install: ``pip install .`` builds a wheel with no deprecation warnings, and works
without a C compiler (pure-Python decoders and fold, said by ``carbonspan --version``), giving
the same report as the C build.

The wheel is built from a copy of the checkout with ``--no-build-isolation`` (setuptools and
wheel come from the test extra), so nothing is downloaded; ``CC=/bin/false`` stands in for a
machine without a compiler (the extensions are optional, setup.py). The installed tree is run
with ``python -S`` and an explicit path, so the checkout's editable install cannot answer.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "agent" / "examples" / "example-spans.otlp.json"
_SKIP = shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "__pycache__", "*.so",
                               ".pytest_cache", ".hypothesis", ".ruff_cache", "archives", "tests")


def _wheel_without_compiler(tmp_path: Path) -> tuple[Path, str]:
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=_SKIP)
    env = {**os.environ, "CC": "/bin/false", "PIP_NO_INDEX": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path / "wheel"), str(src)],
        capture_output=True, text=True, env=env, timeout=240, check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (wheel,) = (tmp_path / "wheel").glob("carbonspan-*.whl")
    return wheel, out.stdout + out.stderr


def _run_installed(target: Path, *args: str) -> subprocess.CompletedProcess[str]:
    site = sysconfig.get_paths()["purelib"]  # the dependencies, without their .pth hooks
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), site])}
    return subprocess.run(
        [sys.executable, "-S", "-m", "carbonspan", *args],
        capture_output=True, text=True, env=env, cwd=target.parent, timeout=120, check=False,
    )


def test_wheel_builds_without_warnings_and_runs_without_a_compiler(tmp_path: Path) -> None:
    wheel, log = _wheel_without_compiler(tmp_path)
    assert "Deprecat" not in log, [ln for ln in log.splitlines() if "Deprecat" in ln]
    target = tmp_path / "installed"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         str(wheel)],
        check=True, timeout=120, env={**os.environ, "PIP_NO_INDEX": "1"},
    )
    assert not list(target.rglob("*.so")), "CC=/bin/false must leave the optional C out"
    assert (target / "agent" / "carbon" / "data" / "profiles.json").is_file()
    # the HTML report's templates are package data: the installed tree renders a page from them
    assert (target / "aggregator" / "templates" / "report.html").is_file()
    page = subprocess.run(
        [sys.executable, "-S", "-c", "import aggregator.render_html as r, aggregator.report as b, aggregator.fold.state as f, "
         "aggregator.read as p; print(r.__file__); print(r.render_html(b.build_report(f.AggregateState(), "
         "p.Period.everything(), '<ACME>')))"],
        capture_output=True, text=True, cwd=target.parent, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(target), sysconfig.get_paths()["purelib"]])},
    )
    assert page.returncode == 0, page.stderr
    assert page.stdout.startswith(str(target)) and "<h1>Carbon disclosure: &lt;ACME&gt;</h1>" in page.stdout

    version = _run_installed(target, "--version")
    assert version.returncode == 0, version.stderr
    assert "otlp-protobuf python, otlp-json python, score python, aggregate-fold python" in version.stdout

    pure = _run_installed(target, "score", str(EXAMPLE))
    assert pure.returncode == 0, pure.stderr
    built = subprocess.run(
        [sys.executable, "-m", "carbonspan", "score", str(EXAMPLE)],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=True,
    )
    assert orjson.loads(pure.stdout) == orjson.loads(built.stdout)


def test_version_names_the_accelerators_of_this_build() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "carbonspan", "--version"],
        capture_output=True, text=True, cwd=ROOT, timeout=60, check=True,
    )
    # the suite asserts elsewhere that every extension is built, so here all say C
    assert out.stdout.strip().endswith("(decoders, scorer and fold: otlp-protobuf C, "
                                       "otlp-json C, score C, aggregate-fold C)"), out.stdout


def test_the_version_is_said_once_and_pyproject_agrees() -> None:
    """schema/version.py is the one place wings read the version from (no wing imports the
    ``carbonspan`` command package upward); the package metadata must say the same."""
    import tomllib
    from pathlib import Path

    import carbonspan
    from schema.version import __version__

    pyproject = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    assert pyproject["project"]["version"] == __version__ == carbonspan.__version__
