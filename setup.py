"""Build hook for carbonspan's optional C accelerators (everything else is in pyproject.toml)."""

from setuptools import setup

setup()
