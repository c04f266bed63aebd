"""``/audit/v1/…``: the verifiable audit log's read-only routes (docs/audit-log.md, "Routes").

The checkpoint, the checkpoints and the public key are public: a witness needs no secret.
Proofs and events need ``audit.read`` or ``reasoning.admin``. None of them is audited: a
read that wrote to the log it reads would keep the log from ever being quiet, and nothing
here carries PHI (events hold ids, labels and counts by construction).

Hashes are standard base64. Leaf index = chain position - 1, as in RFC 6962. A proof's
``tree_size`` defaults to the latest checkpoint's (proofs are checked against signed roots),
or to the whole tree while no checkpoint exists.
"""

from __future__ import annotations

import base64
from typing import Any

from django.db import connection
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from audit import merkle, tree
from audit.checkpoints import latest_checkpoint, verifiers
from audit.models import AuditCheckpoint
from audit.verify import dropped_through
from core.api_views import ERRORS, ApiView, limit_parameter, parse_limit, parse_whole_number
from core.errors import InvalidInput, NotFound
from core.scopes import CanReadAudit

MAX_EVENTS = 1000
MAX_CHECKPOINTS = 100
TEXT = "text/plain; charset=utf-8"
NOT_FOUND = {404: OpenApiResponse(OpenApiTypes.OBJECT, description='`{"detail": "..."}`')}


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _int(params: Any, name: str, *, minimum: int, required: bool = True) -> int | None:
    return parse_whole_number(params.get(name), name, minimum=minimum, required=required)


def _int_schema(minimum: int) -> dict[str, Any]:
    """The OpenAPI schema of a parameter ``_int`` reads: a whole number of at most 18 digits."""
    return {"type": "integer", "minimum": minimum, "maximum": 10**18 - 1}


def _signed_size(current: int) -> int:
    latest = latest_checkpoint()
    return latest.tree_size if latest is not None else current


def _size_param(params: Any, name: str, current: int, *, minimum: int = 1) -> int:
    size = _int(params, name, minimum=minimum, required=False)
    if size is None:
        return _signed_size(current)
    if size > current:
        raise InvalidInput(f"the tree has {current} leaves", field=name)
    return size


# --- Public ----------------------------------------------------------------------------


class _Public(ApiView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]


class CheckpointView(_Public):
    @extend_schema(
        operation_id="audit_checkpoint",
        summary="The latest signed checkpoint (C2SP tlog-checkpoint in a signed note)",
        description="Public. `text/plain`: origin, tree size, base64 root hash, an empty line and the Ed25519 "
        "signature line. 404 before the first checkpoint is signed. Format: docs/audit-log.md, 'Checkpoints'.",
        responses={(200, "text/plain"): OpenApiTypes.STR, **NOT_FOUND},
        auth=[],
    )
    def get(self, request: Request) -> HttpResponse:
        latest = latest_checkpoint()
        if latest is None:
            raise NotFound("no checkpoint has been signed yet")
        response = HttpResponse(latest.note, content_type=TEXT)
        response["Cache-Control"] = "no-cache"
        return response


class CheckpointSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    tree_size = serializers.IntegerField()
    root_hash = serializers.CharField(help_text="Standard base64 of the 32-byte root.")
    key_id = serializers.CharField(help_text="8 hex digits: the signing key's id.")
    created_at = serializers.DateTimeField()
    note = serializers.CharField(help_text="The signed note, exactly as `GET /audit/v1/checkpoint` served it.")


class CheckpointsView(_Public):
    query_parameters = {
        "get": [
            OpenApiParameter(
                "since",
                _int_schema(0),
                description="Only checkpoints with a larger id (the last id of the previous page). Default 0.",
            ),
            limit_parameter(default=MAX_CHECKPOINTS, maximum=MAX_CHECKPOINTS),
        ]
    }

    @extend_schema(
        operation_id="audit_checkpoints",
        summary="Every stored checkpoint, oldest first",
        description="Public. Checkpoints in signing order after `since` (an id), at most `limit`.",
        responses={200: CheckpointSerializer(many=True), 400: ERRORS[400]},
        auth=[],
    )
    def get(self, request: Request) -> Response:
        since = _int(request.query_params, "since", minimum=0, required=False) or 0
        limit = parse_limit(request.query_params.get("limit"), default=MAX_CHECKPOINTS, maximum=MAX_CHECKPOINTS)
        rows = AuditCheckpoint.objects.filter(id__gt=since).order_by("id")[:limit]
        return Response(
            [
                {
                    "id": row.pk,
                    "tree_size": row.tree_size,
                    "root_hash": b64(bytes(row.root_hash)),
                    "key_id": row.key_id,
                    "created_at": row.created_at,
                    "note": row.note,
                }
                for row in rows
            ]
        )


class PublicKeyView(_Public):
    @extend_schema(
        operation_id="audit_public_key",
        summary="The checkpoints' verifier keys (C2SP signed-note)",
        description="Public. `text/plain`, one verifier key per line (`<name>+<key id>+<base64(0x01 || key)>`): "
        "the current signing key first, then rotated-out keys (they verify older checkpoints only).",
        responses={(200, "text/plain"): OpenApiTypes.STR},
        auth=[],
    )
    def get(self, request: Request) -> HttpResponse:
        return HttpResponse("".join(f"{key.key_string}\n" for key in verifiers()), content_type=TEXT)


# --- Proofs and events (audit.read or reasoning.admin) ----------------------------------


class InclusionSerializer(serializers.Serializer[Any]):
    leaf_index = serializers.IntegerField(help_text="0-based: the chain position - 1.")
    position = serializers.IntegerField()
    event_id = serializers.IntegerField()
    tree_size = serializers.IntegerField()
    leaf_hash = serializers.CharField()
    audit_path = serializers.ListField(child=serializers.CharField(), help_text="RFC 9162 inclusion proof.")


class InclusionProofView(ApiView):
    permission_classes = [CanReadAudit]
    query_parameters = {
        "get": [
            OpenApiParameter("position", _int_schema(1), description="The chain position (1-based)."),
            OpenApiParameter("event", _int_schema(1), description="Or the event's sequence number."),
            OpenApiParameter("tree_size", _int_schema(1), description="Default: the latest checkpoint's tree size."),
        ]
    }

    @extend_schema(
        operation_id="audit_inclusion_proof",
        summary="An event's inclusion proof",
        description="Needs `audit.read` or `reasoning.admin`. Give `position` or `event` (one of them). 400 "
        "naming the parameter when it is missing, not a whole number, or outside the tree (`tree_size` above "
        "the tree, a position past `tree_size`); 404 for an event not linked yet. Not audited.",
        responses={200: InclusionSerializer, **ERRORS, **NOT_FOUND},
        examples=[
            OpenApiExample(
                "Position 3 of 8",
                response_only=True,
                value={
                    "leaf_index": 2,
                    "position": 3,
                    "event_id": 41,
                    "tree_size": 8,
                    "leaf_hash": "3v3…=",
                    "audit_path": ["…=", "…=", "…="],
                },
            )
        ],
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        if ("position" in params) == ("event" in params):
            raise InvalidInput("give either position or event", field="position")
        with connection.cursor() as cursor:
            current = tree.tree_size(cursor)
            size = _size_param(params, "tree_size", current)
            if "event" in params:
                event_id = _int(params, "event", minimum=1)
                cursor.execute("SELECT position FROM audit_chain_link WHERE event_id = %s", [event_id])
                row = cursor.fetchone()
                if row is None:
                    raise NotFound(f"event {event_id} is not in the tree (unknown, or not linked yet)")
                position = int(row[0])
                if position > size:
                    raise InvalidInput(f"event {event_id} is at position {position}, past the tree size", field="event")
            else:
                position = _int(params, "position", minimum=1) or 0
                if position > size:
                    raise InvalidInput(f"must be at most the tree size ({size})", field="position")
            cursor.execute("SELECT event_id FROM audit_chain_link WHERE position = %s", [position])
            row = cursor.fetchone()
            event_id = int(row[0]) if row else 0
            index = position - 1
            keys = merkle.nodes_for(merkle.inclusion_ranges(index, size)) | {(0, index)}
            nodes = tree.fetch(keys, cursor)
        if len(nodes) != len(keys):
            raise tree.MissingNodes(f"the tree lacks nodes for position {position}")
        return Response(
            {
                "leaf_index": index,
                "position": position,
                "event_id": event_id,
                "tree_size": size,
                "leaf_hash": b64(nodes[(0, index)]),
                "audit_path": [b64(item) for item in merkle.inclusion_proof(index, size, nodes)],
            }
        )


class ConsistencySerializer(serializers.Serializer[Any]):
    first = serializers.IntegerField()
    second = serializers.IntegerField()
    consistency = serializers.ListField(child=serializers.CharField(), help_text="RFC 9162 consistency proof.")


class ConsistencyProofView(ApiView):
    permission_classes = [CanReadAudit]
    query_parameters = {
        "get": [
            OpenApiParameter("from", _int_schema(0), required=True, description="The older tree size."),
            OpenApiParameter("to", _int_schema(0), description="The newer tree size; default the latest checkpoint's."),
        ]
    }

    @extend_schema(
        operation_id="audit_consistency_proof",
        summary="A consistency proof between two tree sizes",
        description="Needs `audit.read` or `reasoning.admin`. Proves that the tree of `to` leaves extends the tree of "
        "`from` leaves (RFC 9162 §2.1.4). 400 naming the parameter when missing, not a whole number, `from` > `to` "
        "or `to` above the tree. Not audited.",
        responses={200: ConsistencySerializer, **ERRORS},
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        first = _int(params, "from", minimum=0) or 0
        current = tree.tree_size()
        second = _size_param(params, "to", current, minimum=0)
        if first > second:
            raise InvalidInput(f"must be at most `to` ({second})", field="from")
        proof = tree.consistency_proof(first, second)
        return Response({"first": first, "second": second, "consistency": [b64(item) for item in proof]})


class EventSerializer(serializers.Serializer[Any]):
    position = serializers.IntegerField()
    event_id = serializers.IntegerField()
    leaf_hash = serializers.CharField()
    canonical = serializers.CharField(
        allow_null=True,
        help_text="Standard base64 of the event's canonical bytes; null when the event row is gone (dropped by "
        "retention, or missing).",
    )


_EVENTS = """
SELECT l.position, l.event_id, n.hash, e.canonical
  FROM audit_chain_link l
  LEFT JOIN audit_event e ON e.id = l.event_id
  LEFT JOIN audit_tree_node n ON n.level = 0 AND n.idx = l.position - 1
"""


def _event(row: tuple[Any, ...]) -> dict[str, Any]:
    position, event_id, leaf, canonical = row
    return {
        "position": position,
        "event_id": event_id,
        "leaf_hash": b64(bytes(leaf)) if leaf is not None else None,
        "canonical": b64(bytes(canonical)) if canonical is not None else None,
    }


class EventView(ApiView):
    permission_classes = [CanReadAudit]

    @extend_schema(
        operation_id="audit_event",
        summary="One chained event's canonical bytes and leaf hash",
        description="Needs `audit.read` or `reasoning.admin`. By sequence number. 404 for an unknown event or one "
        "not linked yet. The canonical bytes hold ids, labels and counts only (audit payloads refuse content).",
        parameters=[OpenApiParameter("seq", int, OpenApiParameter.PATH, description="The event sequence number.")],
        responses={200: EventSerializer, **ERRORS, **NOT_FOUND},
    )
    def get(self, request: Request, seq: int) -> Response:
        with connection.cursor() as cursor:
            cursor.execute(_EVENTS + " WHERE l.event_id = %s", [seq])
            row = cursor.fetchone()
        if row is None:
            raise NotFound(f"event {seq} is not in the tree (unknown, or not linked yet)")
        return Response(_event(row))


class EventsPageSerializer(serializers.Serializer[Any]):
    tree_size = serializers.IntegerField()
    dropped_through = serializers.IntegerField(
        help_text="Positions 1..dropped_through were dropped by retention (AUDIT_RETENTION_DAYS): served with "
        "`canonical` null. 0 when none were."
    )
    start_edge = serializers.ListField(
        child=serializers.ListField(),
        help_text="The tree's right edge at `dropped_through`: `[level, base64 hash]` per set bit of it, largest "
        "first, to verify from (the signed roots past it bind it). Empty when nothing was dropped.",
    )
    events = EventSerializer(many=True)


class EventsView(ApiView):
    permission_classes = [CanReadAudit]
    query_parameters = {
        "get": [
            OpenApiParameter("start", _int_schema(1), description="The first chain position (default 1)."),
            limit_parameter(default=MAX_EVENTS, maximum=MAX_EVENTS),
        ]
    }

    @extend_schema(
        operation_id="audit_events",
        summary="Chained events in position order (what the standalone verifier reads)",
        description="Needs `audit.read` or `reasoning.admin`. From `start`, at most `limit`, with the current "
        "`tree_size`. Not audited.",
        responses={200: EventsPageSerializer, **ERRORS},
    )
    def get(self, request: Request) -> Response:
        start = _int(request.query_params, "start", minimum=1, required=False) or 1
        limit = parse_limit(request.query_params.get("limit"), default=MAX_EVENTS, maximum=MAX_EVENTS)
        with connection.cursor() as cursor:
            size = tree.tree_size(cursor)
            cursor.execute(
                _EVENTS + " WHERE l.position >= %s AND l.position < %s ORDER BY l.position",
                [start, start + limit],
            )
            rows = cursor.fetchall()
            dropped = dropped_through()
            edge = tree.edge(dropped, cursor) if dropped else []
        return Response(
            {
                "tree_size": size,
                "dropped_through": dropped,
                "start_edge": [[level, b64(digest)] for level, digest in edge],
                "events": [_event(row) for row in rows],
            }
        )
