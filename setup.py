"""Build hook for carbonspan's C accelerator (everything else is in pyproject.toml).

``agent.otlp._wire`` is the fast OTLP protobuf decoder. It is optional so that a machine
without a C compiler still installs carbonspan (``agent.otlp`` then falls back to the
reference decoder); ``tests/otlp`` asserts that it is built, so CI never runs slowly unnoticed.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "agent.otlp._wire",
            sources=["agent/otlp/_wire.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
)
