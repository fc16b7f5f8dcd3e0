"""The carbonspan agent: OTLP spans in, scored windows out, hash-chained archives on disk."""
