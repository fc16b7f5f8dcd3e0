"""carbonspan: per-service energy and carbon from OpenTelemetry traces."""

from schema.version import __version__

__all__ = ["__version__"]
