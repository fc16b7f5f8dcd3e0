"""``python -m carbonspan.buildcheck``: exit 1, naming them, if a C accelerator did not build.

``setup.py`` marks the C extensions optional, so that ``pip install .`` on a machine without a C
compiler still installs the pure-Python paths (same answers, slower). The price is that a
compile error is only a line in pip's output, and a stale build of an old ``*_VERSION`` is
refused at import with only a warning. ``make venv`` (and so ``make test``, ``make demo`` and
``make bench``) runs this check after installing, so a checkout whose C did not build stops there
instead of running on the fallback. ``CARBONSPAN_ALLOW_PYTHON=1`` accepts the Python paths on
purpose (a machine without a compiler), with a warning.
"""

from __future__ import annotations

import os
import sys

ALLOW_ENV = "CARBONSPAN_ALLOW_PYTHON"


def main() -> int:
    from carbonspan.cli import accelerators

    missing = [name for name, in_use in accelerators().items() if not in_use]
    if not missing:
        return 0
    names = ", ".join(missing)
    if os.environ.get(ALLOW_ENV) == "1":
        print(f"carbonspan: WARNING: the C accelerator(s) {names} are not in use; the pure-Python "
              f"paths run (same answers, slower) because {ALLOW_ENV}=1", file=sys.stderr)
        return 0
    print(f"carbonspan: the C accelerator(s) {names} did not build or were refused (a compiler error, "
          "no C compiler, or a stale build; pip's output and the warnings above say which). See the "
          "compiler's output with `.venv/bin/pip install -e '.[test]' -v`, fix it and run `make venv` "
          f"again; or set {ALLOW_ENV}=1 to use the pure-Python paths on purpose.", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
