"""OpenTelemetry set-up from the standard ``OTEL_*`` variables.

Exporters are off unless asked for: ``OTEL_METRICS_EXPORTER`` and ``OTEL_TRACES_EXPORTER``
accept ``none`` (default), ``console`` or ``otlp`` (OTLP/HTTP; endpoint and headers from
the usual ``OTEL_EXPORTER_OTLP_*`` variables). The metric instruments themselves live in
``reasoning.metrics`` and always record; with no exporter nothing leaves the process.
"""

from __future__ import annotations

from config.env import env_choice

_EXPORTERS = ("none", "console", "otlp")
_configured = False


def configure_telemetry() -> None:
    global _configured
    if _configured:
        return
    _configured = True
    metrics_exporter = env_choice("OTEL_METRICS_EXPORTER", _EXPORTERS, "none")
    traces_exporter = env_choice("OTEL_TRACES_EXPORTER", _EXPORTERS, "none")

    if metrics_exporter != "none":
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import (
            ConsoleMetricExporter,
            MetricExporter,
            PeriodicExportingMetricReader,
        )
        from opentelemetry.sdk.resources import Resource

        exporter: MetricExporter
        if metrics_exporter == "console":
            exporter = ConsoleMetricExporter()
        else:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            exporter = OTLPMetricExporter()
        provider = MeterProvider(
            resource=Resource.create({"service.name": "reasoning-flow-tracker"}),
            metric_readers=[PeriodicExportingMetricReader(exporter)],
        )
        metrics.set_meter_provider(provider)

    if traces_exporter != "none":
        from opentelemetry import trace
        from opentelemetry.instrumentation.django import DjangoInstrumentor
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

        span_exporter: SpanExporter
        if traces_exporter == "console":
            span_exporter = ConsoleSpanExporter()
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            span_exporter = OTLPSpanExporter()
        tracer_provider = TracerProvider(resource=Resource.create({"service.name": "reasoning-flow-tracker"}))
        tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
        trace.set_tracer_provider(tracer_provider)
        DjangoInstrumentor().instrument()
