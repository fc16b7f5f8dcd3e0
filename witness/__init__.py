"""A transparency-log witness for carbonspan archives (C2SP tlog-witness), ``carbonspan witness``.

A capability neither the agent nor the aggregator owns: it imports only ``schema``. The agent
pushes signed checkpoints to it; it cosigns one only if the agent's pinned key signed it and it
is consistent with the last checkpoint it cosigned for that origin, and it keeps its own
hash-chained log of what it cosigned, which an auditor reads with ``verify --witness-log``.
"""
