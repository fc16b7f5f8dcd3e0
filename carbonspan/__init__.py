"""carbonspan: per-service energy and carbon from OpenTelemetry traces."""

__version__ = "0.1.0"
