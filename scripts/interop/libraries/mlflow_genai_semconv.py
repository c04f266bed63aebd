# /// script
# dependencies = [
#   "mlflow",
#   "openai",
#   "httpx",
#   "opentelemetry-exporter-otlp-proto-http",
# ]
# ///
"""MLflow tracing with MLFLOW_ENABLE_OTEL_GENAI_SEMCONV=true: spans translated to the OpenTelemetry GenAI
semantic conventions before OTLP export. The scenarios are those of ``mlflow.py`` (agent, chat, stream,
tool-error, model-error), which this runs as is.
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path

os.environ["MLFLOW_ENABLE_OTEL_GENAI_SEMCONV"] = "true"
os.environ.setdefault("OTEL_SERVICE_NAME", "interop-mlflow-genai-semconv")

runpy.run_path(str(Path(__file__).resolve().parent / "mlflow.py"), run_name="__main__")
