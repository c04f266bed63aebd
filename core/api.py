"""Shared API plumbing: the JSON parser, the single error shape, JSON 404/500 pages.

The API view base and the OpenAPI schema class are in ``core.api_views``: DRF's settings
import this module while ``rest_framework.views`` is still loading.
"""

from __future__ import annotations

import codecs
import json
import sys
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import HttpRequest, HttpResponse, JsonResponse
from rest_framework import status
from rest_framework.exceptions import ParseError
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import JSONParser, get_encoding  # type: ignore[attr-defined]  # DRF >= 3.18
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from core import outage
from core.errors import ServiceError


class StrictJSONParser(JSONParser):
    """DRF's JSON parser, plus clean 400s for bodies it would otherwise crash on or misread.

    The standard parser lets ``RecursionError`` (absurdly deep nesting) escape as a 500, and
    lets the last of two equal keys win: ``{"pii_fields": ["name"], ..., "pii_fields": []}``
    would store the name in clear. A duplicate key, at any depth, is a 400 naming it.
    """

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        # DRF's get_encoding refuses bytes-to-bytes codecs (bz2_codec, …), which would
        # crash or inflate a small body past the size limit.
        encoding = get_encoding(parser_context or {})
        try:
            decoded = codecs.getreader(encoding)(stream)
            return json.load(decoded, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
        except RecursionError as exc:
            raise ParseError("JSON parse error - nesting too deep") from exc
        except (ValueError, UnicodeDecodeError) as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc


class ContentNegotiation(DefaultContentNegotiation):
    """DRF's negotiation, answered without parsing in the usual case.

    A view of one renderer (every API view: JSON), a request without a query string, and an
    ``Accept`` that is absent, ``*/*`` or that renderer's own type: DRF would choose that
    renderer and its own type, after parsing the header and the query string (~5 % of the CPU
    of a small API request). Anything else (``?format=``, a list with weights, a type with
    parameters such as ``indent``, a type no renderer offers: 406) goes through DRF's own."""

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        renderers = list(renderers)
        if format_suffix is None and len(renderers) == 1 and not request.META.get("QUERY_STRING"):
            renderer = renderers[0]
            accept = request.META.get("HTTP_ACCEPT")
            if accept is None or accept == "*/*" or accept == renderer.media_type:
                return renderer, renderer.media_type
        return super().select_renderer(request, renderers, format_suffix)  # type: ignore[no-any-return]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Called for every object, innermost first, so nested duplicates are caught too.
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, plus service errors and oversized or suspicious bodies as JSON 4xx, and
    an unreachable database as a 503 with Retry-After (``core.outage``)."""
    # Imported here: rest_framework.views reads DEFAULT_PARSER_CLASSES (this module) as it loads.
    from rest_framework.views import exception_handler as drf_exception_handler

    if isinstance(exc, ServiceError):
        return Response(exc.as_body(), status=exc.status_code)
    if outage.is_database_unavailable(exc):
        outage.note_unavailable(exc)
        response = Response(
            {"detail": outage.DETAIL},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers=outage.retry_after_headers(),
        )
        return outage.mark_logged(response)
    if isinstance(exc, RequestDataTooBig):
        return Response(
            {"detail": "Request body is too large."},
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, SuspiciousOperation):
        return Response({"detail": "Bad request."}, status=status.HTTP_400_BAD_REQUEST)
    return drf_exception_handler(exc, context)


def _wants_json(request: HttpRequest) -> bool:
    return request.path.startswith(("/api/", "/admin/v1/", "/audit/v1/", "/v1/"))


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _wants_json(request):
        return JsonResponse({"detail": "Not found."}, status=404)
    from django.views.defaults import page_not_found

    return page_not_found(request, exception or Exception("not found"))


def server_error(request: HttpRequest) -> HttpResponse:
    # handler500 runs inside Django's ``except``: the exception is the one being handled.
    unavailable = outage.unavailable_response(request, sys.exc_info()[1])
    if unavailable is not None:
        return unavailable
    if _wants_json(request):
        return JsonResponse({"detail": "Internal server error."}, status=500)
    from django.views.defaults import server_error as default_server_error

    return default_server_error(request)
