"""Benchmarks behind ``make bench``: each ``bench_*.py`` module has a ``main()`` that prints figures."""
