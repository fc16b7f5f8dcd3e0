"""Build hook for carbonspan's C accelerator (everything else is in pyproject.toml).

``agent.otlp._wire`` is the fast OTLP protobuf decoder, ``agent.otlp._jsonwalk`` the fast
OTLP/JSON one, ``agent._score`` the scorer's per-span pass and ``aggregator.fold._fold`` the
fold's accelerator. All are optional so that a machine without a C compiler still
installs carbonspan (``agent.otlp`` then falls back to the reference decoder, the aggregator to
its reference fold); ``make venv`` stops if one did not build (``carbonspan.buildcheck``), and
``tests/otlp`` and ``tests/aggregator`` assert that they are built, so CI never runs slowly
unnoticed.
"""

import os

from setuptools import Extension, setup

#: ``make venv`` sets CARBONSPAN_REQUIRE_C=1: there a compile error fails the install, where an
#: optional extension's failure would leave the previous build in place (or none) with only a
#: line in pip's output; a plain ``pip install .`` keeps them optional for machines without a compiler
OPTIONAL = os.environ.get("CARBONSPAN_REQUIRE_C") != "1"

FLAGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"]

setup(
    ext_modules=[
        Extension(
            "agent.otlp._wire",
            sources=["agent/otlp/_wire.c"],
            depends=["agent/otlp/_batch.h"],
            extra_compile_args=FLAGS,
            optional=OPTIONAL,
        ),
        Extension(
            "agent.otlp._jsonwalk",
            sources=["agent/otlp/_jsonwalk.c"],
            depends=["agent/otlp/_batch.h", "agent/otlp/_jsonlex.h"],
            extra_compile_args=FLAGS,
            optional=OPTIONAL,
        ),
        # the scorer's per-span pass: no -ffast-math and no fused multiply-add, so that every
        # sum is the reference's, bit for bit
        Extension(
            "agent._score",
            sources=["agent/_score.c"],
            extra_compile_args=[*FLAGS, "-ffp-contract=off"],
            optional=OPTIONAL,
        ),
        # gnu11: unsigned __int128 for exact counts; no -ffast-math and no fused multiply-add
        # (gnu11 lets GCC contract a*b+c into one rounding): the sums must be the reference's
        Extension(
            "aggregator.fold._fold",
            sources=["aggregator/fold/_fold.c"],
            extra_compile_args=[*FLAGS[:1], "-std=gnu11", *FLAGS[2:], "-ffp-contract=off"],
            optional=OPTIONAL,
        ),
    ]
)
