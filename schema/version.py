"""carbonspan's version, where every wing may read it (reports and attestations name it).

It lives in the shared contract rather than in the ``carbonspan`` command package so that
``aggregator`` (and any other wing) never imports upward into the command that uses it;
``carbonspan.__version__`` re-exports it and ``pyproject.toml`` must say the same
(``tests/test_install.py``).
"""

__version__ = "0.1.0"
