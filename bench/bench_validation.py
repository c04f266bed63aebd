"""Request validation in process (issue 42): microseconds per body, DRF alone against the compiled fast path.

No server and no database. The bodies:

- ``step_otlp``: a step as the OTLP route maps it from the ingest bench's workload (bench/bench_ingest.py:
  a retrieval span with its ``reasoning.*`` attributes, kept as an encrypted JSON object);
- ``step_json``: a step as an SDK sends it to ``POST /api/reasoning/flows/{id}/steps`` (ids, a model call's
  tokens, small inputs and outputs, the SDK's ``isoformat()`` start);
- ``ingest_item``: one item of ``POST /api/reasoning/ingest``: a flow, its 5 steps like ``step_json`` and its
  close;
- ``otlp_span``: the OTLP route's validation of one span (``reasoning.recording.traces._validate``: flow,
  close and step as mapped), the mean over the workload's 60 spans of 10 traces.

Each case runs ``--loops`` times per repetition, DRF alone (``core.serializers.drf_validated`` on the cached
serializer, which is what ``validated`` did before the fast path) and then through ``validated``, alternating;
the figure is the median over ``--repeat`` repetitions. Printed through ``bench_common.report`` as
``validate_<case>_us=<fast> validate_<case>_drf_us=<DRF alone>``; ``--profile`` prints a cProfile of the fast
path over ``step_otlp``.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

STEP_JSON = {
    "id": "8a1e2c52-0c5f-4b8e-9d55-2f3f4d6a7b10",
    "kind": "llm_prompt",
    "agent": "planner",
    "summary_text": "Asked the model which guideline applies to the question and why.",
    "rationale": "The question names a condition and a drug class; the guideline index has both.",
    "inputs": {"question_topic": "dosing", "candidates": ["g-12", "g-31"], "k": 5},
    "outputs": {"chosen": "g-31", "scores": [0.82, 0.41]},
    "pii_fields": [],
    "parent_step_id": "0f7c9f0e-3b1a-4d2e-8f6a-1c2b3d4e5f60",
    "confidence": 0.82,
    "latency_ms": 840,
    "model": "gpt-4o-2024-08-06",
    "input_tokens": 1250,
    "output_tokens": 180,
    "started_at": "2026-12-04T10:15:02.123456+00:00",
}


def bodies() -> dict[str, tuple[type[Any] | None, Any]]:
    from bench_ingest import encode, generate

    from reasoning.recording import otlp
    from reasoning.recording.serializers import IngestItemSerializer, StepCreateSerializer

    body = encode(generate(10, 1), 10)[0][1]
    spans, _ = otlp.map_request(otlp.decode_request(body, "application/x-protobuf"))
    step_otlp = next(span.step for span in spans if span.step and not span.flow)
    item = {
        "id": "5b0f3c1e-7d2a-4e9b-8c6d-0a1b2c3d4e5f",
        "trigger_type": "user_question",
        "trigger_summary": "A question about dosing guidelines.",
        "agent": "planner",
        "session_id": "session-42",
        "started_at": "2026-12-04T10:15:00.000000+00:00",
        "steps": [{**STEP_JSON, "id": f"8a1e2c52-0c5f-4b8e-9d55-2f3f4d6a7b1{i}"} for i in range(5)],
        "close": {"flow_state": "completed", "outcome_type": "answered", "ended_at": "2026-12-04T10:15:09Z"},
    }
    return {
        "step_otlp": (StepCreateSerializer, step_otlp),
        "step_json": (StepCreateSerializer, STEP_JSON),
        "ingest_item": (IngestItemSerializer, item),
        "otlp_span": (None, spans),
    }


def time_per_call(call: Callable[[], object], loops: int, per: int = 1) -> float:
    """Mean microseconds per call (per ``per`` items when a call handles several)."""
    start = time.perf_counter()
    for _ in range(loops):
        call()
    return (time.perf_counter() - start) / (loops * per) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7, help="repetitions; the median is printed")
    parser.add_argument("--loops", type=int, default=2000, help="calls per case and repetition")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the fast path over step_otlp")
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from core.compiled_serializers import compile_serializer
    from core.serializers import drf_validated, validated
    from reasoning.recording import traces
    from reasoning.recording.serializers import StepCreateSerializer

    cases = bodies()
    instances: dict[type[Any], Any] = {}

    def drf_alone(serializer_class: type[Any], data: Any) -> dict[str, Any]:
        instance = instances.get(serializer_class) or instances.setdefault(serializer_class, serializer_class())
        return drf_validated(instance, data)

    def timer(name: str, validate: Callable[[type[Any], Any], dict[str, Any]]) -> Callable[[int], float]:
        """Microseconds per body (per span for ``otlp_span``) over ``loops`` calls of ``validate``."""
        serializer_class, data = cases[name]
        if serializer_class is not None:
            body_class: type[Any] = serializer_class
            assert validate(body_class, data) == drf_alone(body_class, data)
            return lambda loops: time_per_call(lambda: validate(body_class, data), loops)

        def spans() -> None:
            for span in data:
                assert isinstance(traces._validate(span), dict)

        def run(loops: int) -> float:
            with mock.patch.object(traces, "validated", validate):
                return time_per_call(spans, loops, len(data))

        return run

    # How many of the bodies validated take the fast path (the rest go to DRF): all of them, or the figures
    # measure the fallback.
    fast_paths: dict[type[Any], Any] = {}
    taken: list[bool] = []

    def counting(serializer_class: type[Any], data: Any) -> dict[str, Any]:
        if serializer_class not in fast_paths:
            fast_paths[serializer_class] = compile_serializer(serializer_class())
        fast = fast_paths[serializer_class]
        taken.append(fast is not None and fast(data) is not None)
        return validated(serializer_class, data)

    for serializer_class, data in cases.values():
        if serializer_class is None:
            with mock.patch.object(traces, "validated", counting):
                for span in data:
                    traces._validate(span)
        else:
            counting(serializer_class, data)
    print(f"fast_path_bodies={sum(taken)}/{len(taken)}")

    if args.profile:
        step = cases["step_otlp"][1]
        profiler = cProfile.Profile()
        profiler.runcall(time_per_call, lambda: validated(StepCreateSerializer, step), args.loops)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        return

    figures = []
    for name in cases:
        loops = max(1, args.loops // (60 if name == "otlp_span" else 1))
        drf_time, fast_time = timer(name, drf_alone), timer(name, validated)
        drf_time(20), fast_time(20)  # warm the caches
        drf, fast = [], []
        for _ in range(args.repeat):
            drf.append(drf_time(loops))
            fast.append(fast_time(loops))
        figures.append(f"validate_{name}_us={statistics.median(fast):.1f}")
        figures.append(f"validate_{name}_drf_us={statistics.median(drf):.1f}")
    from bench_common import report

    report(" ".join(figures))


if __name__ == "__main__":
    main()
