"""The MCP resources: ``pathway://{id}`` and ``flow://{id}`` (docs/mcp.md), and the token check
both transports start with.

Both resources are operator reads (``reasoning.admin``, like the pathway and admin flow
routes) and neither can carry raw chain-of-thought: a pathway holds none, and a flow is
read as the PHI-safe raw export row (``reasoning.evaluation.export``), whose queries never
select ``reasoning_content``, inputs, outputs or the encrypted columns.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import close_old_connections
from django.http import HttpRequest
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.views import APIView

from core import scopes
from core.actors import Principal
from pathways.models import Pathway
from pathways.radar import candidate_radars
from reasoning.evaluation.export import facts_of, flow_values, raw_row, steps_of
from reasoning.models import ReasoningFlow

PATHWAY_TEMPLATE = "pathway://{id}"
FLOW_TEMPLATE = "flow://{id}"
MIME_TYPE = "application/json"


class ResourceRefused(Exception):
    """A read the caller may not make, or of something that does not exist: ``code`` is the
    JSON-RPC error code, the message says which."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# JSON-RPC codes: MCP's "resource not found", and the generic invalid-params one.
NOT_FOUND = -32002
INVALID = -32602


def authenticate(raw: str) -> Principal:
    """The principal of a bearer secret, decided as for every HTTP route (the API's
    authentication classes: unknown, revoked, expired, rotated). Raises DRF's
    ``AuthenticationFailed``."""
    http = HttpRequest()
    http.META["HTTP_AUTHORIZATION"] = f"Bearer {raw}"
    close_old_connections()
    try:
        request = Request(http, authenticators=APIView().get_authenticators())
        found = request.user
    finally:
        close_old_connections()
    if not isinstance(found, Principal):
        raise exceptions.AuthenticationFailed("Malformed Authorization header: expected 'Bearer <token>'.")
    return found


@dataclass(frozen=True)
class Contents:
    uri: str
    text: str


def read_resource(uri: str, token: str | None) -> Contents:
    scheme, sep, raw_id = uri.partition("://")
    if not sep or scheme not in ("pathway", "flow"):
        raise ResourceRefused(INVALID, f"Unknown resource {uri!r}: use pathway://{{id}} or flow://{{id}}.")
    try:
        principal = authenticate(token or "")
    except exceptions.AuthenticationFailed as exc:
        raise ResourceRefused(INVALID, str(exc.detail)) from None
    if not principal.has_scope(scopes.ADMIN):
        raise ResourceRefused(INVALID, f"This resource needs the '{scopes.ADMIN}' scope.")
    try:
        pk = uuid.UUID(raw_id)
    except ValueError:
        raise ResourceRefused(INVALID, f"{scheme}:// needs a UUID.") from None
    close_old_connections()
    try:
        body = pathway_resource(pk) if scheme == "pathway" else flow_resource(pk)
    finally:
        close_old_connections()
    return Contents(uri, json.dumps(body, cls=DjangoJSONEncoder, ensure_ascii=False))


def pathway_resource(pk: uuid.UUID) -> dict[str, Any]:
    """A pathway's signature (what it was extracted from and its step-kind sequence) and its
    Decision Dimensions radar, as the match route's candidates carry it."""
    pathway = Pathway.objects.filter(pk=pk).first()
    if pathway is None:
        raise ResourceRefused(NOT_FOUND, f"No pathway {pk}.")
    (radar,) = candidate_radars([pathway])
    return {
        "id": pathway.pk,
        "trigger_type": pathway.trigger_type,
        "trigger_ref": pathway.trigger_ref,
        "signature": {"step_kinds": list(pathway.step_kinds), "agents": sorted(pathway.agents)},
        "seed_flow_id": pathway.seed_flow_id,
        "confidence": pathway.confidence,
        "hit_count": pathway.hit_count,
        "last_hit_at": pathway.last_hit_at,
        "embedding_model": pathway.embedding_model or None,
        "demoted_at": pathway.demoted_at,
        "demotion_reason": pathway.demotion_reason,
        "created_at": pathway.created_at,
        "dimensions": radar,
    }


def flow_resource(pk: uuid.UUID) -> dict[str, Any]:
    """A completed flow as one PHI-safe raw export row (docs/evaluation.md, "The raw export row"):
    summaries only when they passed the guard, back-references as booleans, no step content."""
    rows = list(flow_values(ReasoningFlow.objects.completed().filter(pk=pk)))
    if not rows:
        raise ResourceRefused(NOT_FOUND, f"No completed flow {pk} (the projection covers completed flows).")
    (row,) = rows
    return raw_row(row, steps_of([pk])[pk], facts_of(rows).get(pk))
