"""Recording flows: the write path's telemetry mapping (the telemetry conventions under ``conventions``)."""
