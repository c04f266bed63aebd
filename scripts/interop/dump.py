"""Print the spans of captured fixtures as trees: name, kind, status, attributes, events.

    .venv/bin/python scripts/interop/dump.py tests/fixtures/otlp/<library> [--values]

Attribute values are cut to 60 characters (``--values``: 400). Runs in the project's
virtualenv (it needs opentelemetry-proto).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span


def load(path: Path) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    if path.suffix == ".json":
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        from reasoning.recording.otlp import decode_request

        return decode_request(path.read_bytes(), "application/json")
    request.ParseFromString(path.read_bytes())
    return request


def text(value: AnyValue, width: int) -> str:
    which = value.WhichOneof("value")
    if which in ("array_value", "kvlist_value"):
        shown = json.dumps(json_format.MessageToDict(value))
    else:
        shown = repr(getattr(value, which)) if which else "<empty>"
    return shown if len(shown) <= width else shown[: width - 1] + "…"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("--values", action="store_true")
    args = parser.parse_args()
    width = 400 if args.values else 60
    manifest = json.loads((args.folder / "capture.json").read_text())
    print(f"{manifest['library']}: {manifest['packages']}")
    for entry in manifest["requests"]:
        request = load(args.folder / entry["file"])
        print(f"\n=== {entry['file']} (scenario {entry['scenario']})")
        for resource_spans in request.resource_spans:
            resource = {a.key: text(a.value, width) for a in resource_spans.resource.attributes}
            print(f"resource: {resource}")
            for scope_spans in resource_spans.scope_spans:
                print(f" scope: {scope_spans.scope.name} {scope_spans.scope.version}")
                spans = list(scope_spans.spans)
                ids = {span.span_id for span in spans}
                children: dict[bytes, list[Span]] = defaultdict(list)
                for span in spans:
                    children[span.parent_span_id if span.parent_span_id in ids else b"top"].append(span)

                def show(span: Span, depth: int, children: dict[bytes, list[Span]] = children) -> None:
                    pad = "  " * depth
                    parent = span.parent_span_id.hex() or "-"
                    print(
                        f"{pad}- {span.name!r} trace={span.trace_id.hex()[:8]} span={span.span_id.hex()} "
                        f"parent={parent} kind={span.kind} status={span.status.code}:{span.status.message[:40]!r}"
                    )
                    for attribute in span.attributes:
                        print(f"{pad}    {attribute.key} = {text(attribute.value, width)}")
                    for event in span.events:
                        keys = {a.key: text(a.value, width) for a in event.attributes}
                        print(f"{pad}    event {event.name}: {keys}")
                    for child in children.get(span.span_id, []):
                        show(child, depth + 1)

                for span in children[b"top"]:
                    show(span, 1)


if __name__ == "__main__":
    main()
