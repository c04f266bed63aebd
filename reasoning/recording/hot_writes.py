"""The hot write routes, answered without URL resolution and DRF's request cycle.

An agent that records one request per step sends, per flow, an open, one request per step and
a close; an OpenTelemetry exporter sends ``POST /v1/traces``. These routes carry almost every
request the write path sees, and DRF's per-request machinery (its ``Request`` wrapper,
negotiation, parser and renderer selection, authentication, permission and throttle classes,
``finalize_response``) costs more CPU than validating and storing a step. ``HotWritesMiddleware``
answers them itself, placed after the middleware every answer needs (security headers, CSP, the
chunked body's reading, Django's ``SecurityMiddleware``, WhiteNoise) and before the middleware of
pages and sessions (sessions, CSRF, authentication by session, the operator's idle timeout,
messages, htmx, replica reads, django-axes), which a Bearer-token write does not use. What of that
inner middleware its answers need it does itself: the host check and ``Content-Length``
(``CommonMiddleware``), the replica pin cookie after a write (``core.replica.pin_after_write``).
Request tracing and Django's request logging are the handler's, not middleware, and run as always.
It answers:

* ``POST /api/reasoning/flows`` (open), ``POST /api/reasoning/flows/<id>/steps`` (one step),
  ``PATCH /api/reasoning/flows/<id>`` (close);
* ``POST /v1/traces`` (OTLP/HTTP, protobuf or JSON: ``reasoning.recording.routes.export_spans``,
  what ``OtlpTracesView`` runs; a refusal as ``google.rpc.Status``, as the view answers it);
* only for a request DRF would take the same way: no query string, ``Content-Type:
  application/json`` (UTF-8) for the JSON routes, an ``Accept`` that JSON satisfies, a body within
  ``DATA_UPLOAD_MAX_MEMORY_SIZE``, and a Bearer token that authenticates and holds
  ``reasoning.write``.

Anything else (no or a bad token, a missing scope, another content type, a query string, an
``Accept`` asking for something else) goes on to the DRF view unchanged, which answers it as it
always has. What runs is what the view runs, not a copy: ``reasoning.auth.authenticate_bearer``
(the token cache), ``reasoning.access.WriteRateThrottle`` (``API_WRITE_RATE_LIMIT``),
``core.api.StrictJSONParser``, ``reasoning.recording.flow_routes.open_flow`` / ``add_step`` / ``close_flow``
(validation, the service, the representation), ``core.api.exception_handler`` for every error
and DRF's ``JSONRenderer``; the answer carries the ``Allow`` header DRF's would.
``tests/reasoning/recording/test_hot_writes.py`` sends the same requests both ways and compares the
answers and what was stored.

``HOT_WRITES=off`` turns it off (every request then goes through DRF).
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from functools import partial

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from rest_framework import exceptions
from rest_framework.renderers import JSONRenderer

from core.api import StrictJSONParser, exception_handler
from core.api_views import ApiView
from core.replica import pin_after_write
from reasoning.access import WriteRateThrottle
from reasoning.auth import TokenPrincipal, authenticate_bearer, only_own_flows
from reasoning.models import ApiToken
from reasoning.recording import flow_routes, routes

_FLOW = "/api/reasoning/flows/"
_STEPS = "/steps"
# A path segment as Django's <str:…> converter matches it.
_SEGMENT = re.compile(r"[^/]+")

_PARSER = StrictJSONParser()
_RENDERER = JSONRenderer()
# The media types whose Accept DRF's negotiation would answer with this JSON renderer.
_ACCEPTED = frozenset({"", "*/*", "application/*", "application/json"})
_JSON_TYPES = frozenset({"application/json", "application/json; charset=utf-8", "application/json;charset=utf-8"})


def _allow(view: type[ApiView]) -> str:
    """The ``Allow`` header DRF puts on every answer of ``view`` (its methods once Django's
    ``View.setup`` has added HEAD to a view with GET)."""
    instance = view()
    instance.setup(HttpRequest())
    return ", ".join(instance.allowed_methods)


class _Caller:
    """What ``WriteRateThrottle`` reads of a request: its method and principal."""

    def __init__(self, method: str, user: TokenPrincipal) -> None:
        self.method = method
        self.user = user


# What a hot route runs once the caller is known: ``reasoning.recording.flow_routes``'s function for the route,
# its flow id bound; called with the body's data, ``actor`` and ``opener_only``.
Handler = Callable[..., flow_routes.Answer]


def route(method: str, path: str) -> tuple[Handler, str] | None:
    """The handler and ``Allow`` header of a hot route, or None."""
    if path == "/api/reasoning/flows":
        return (flow_routes.open_flow, _ALLOW_COLLECTION) if method == "POST" else None
    if not path.startswith(_FLOW):
        return None
    rest = path[len(_FLOW) :]
    if method == "POST" and rest.endswith(_STEPS):
        flow_id = rest[: -len(_STEPS)]
        return (partial(flow_routes.add_step, flow_id), _ALLOW_STEPS) if _SEGMENT.fullmatch(flow_id) else None
    if method == "PATCH" and _SEGMENT.fullmatch(rest):
        return partial(flow_routes.close_flow, rest), _ALLOW_DETAIL
    return None


_ALLOW_COLLECTION = _allow(flow_routes.FlowCollectionView)
_ALLOW_STEPS = _allow(flow_routes.StepCollectionView)
_ALLOW_DETAIL = _allow(flow_routes.FlowDetailView)


_OTLP_PATH = "/v1/traces"
_ALLOW_OTLP = _allow(routes.OtlpTracesView)


def _accepts_json(accept: str) -> bool:
    return all(part.strip().lower() in _ACCEPTED for part in accept.split(","))


class HotWritesMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        # PREPEND_WWW and DISALLOWED_USER_AGENTS are CommonMiddleware's to apply: the view's way.
        if not settings.HOT_WRITES or settings.PREPEND_WWW or settings.DISALLOWED_USER_AGENTS:
            return self.get_response(request)
        method, path = request.method or "", request.path_info
        otlp = method == "POST" and path == _OTLP_PATH
        found = None if otlp else route(method, path)
        if not otlp and found is None:
            return self.get_response(request)
        meta = request.META
        content_type = meta.get("CONTENT_TYPE", "")
        if (
            meta.get("QUERY_STRING")
            or not str(meta.get("CONTENT_LENGTH", "")).isdigit()  # DRF reads a body by its length
            # The OTLP view decodes any type itself (415 for another); DRF parses the others' bodies.
            or (not otlp and content_type.lower() not in _JSON_TYPES)
            or not _accepts_json(meta.get("HTTP_ACCEPT", ""))
        ):
            return self.get_response(request)
        request.get_host()  # CommonMiddleware's check: DisallowedHost (400) for a host not allowed
        try:
            principal = authenticate_bearer(meta.get("HTTP_AUTHORIZATION", ""))
        except exceptions.AuthenticationFailed:
            principal = None
        if principal is None or not principal.has_scope(ApiToken.Scope.WRITE):
            return self.get_response(request)  # DRF answers the 401 or 403 (and its WWW-Authenticate)
        try:
            body = request.body
        except RequestDataTooBig:
            return self.get_response(request)
        if found is None:  # POST /v1/traces
            response = self._answer_otlp(request, principal, body, content_type)
        else:
            handler, allow = found
            response = self._answer(request, handler, allow, principal, body)
        response["Content-Length"] = str(len(response.content))  # as CommonMiddleware sets it
        pin_after_write(request, response)
        return response

    @staticmethod
    def _answer_otlp(request: HttpRequest, principal: TokenPrincipal, body: bytes, content_type: str) -> HttpResponse:
        """``POST /v1/traces`` as ``routes.OtlpTracesView`` answers it: DRF's refusals (429 here) as
        ``google.rpc.Status``, the ``Allow`` header on every other answer."""
        try:
            _throttle(request, principal)
            response = routes.export_spans(
                body, content_type, actor=principal.actor, opener_only=only_own_flows(principal)
            )
        except Exception as exc:
            refusal = exception_handler(exc, {})
            if refusal is None:
                raise  # as from the view: Django's handler500 answers it and logs it
            answer = routes.otlp_refusal(refusal, content_type)
            if getattr(refusal, "_has_been_logged", False):
                answer._has_been_logged = True  # type: ignore[attr-defined]
            return answer
        response["Allow"] = _ALLOW_OTLP
        return response

    @staticmethod
    def _answer(
        request: HttpRequest, handler: Handler, allow: str, principal: TokenPrincipal, body: bytes
    ) -> HttpResponse:
        refusal = None
        try:
            _throttle(request, principal)
            # An empty body is no data (DRF's reading of Content-Length: 0), not a parse error.
            data = _PARSER.parse(io.BytesIO(body), "application/json", {}) if body else {}
            payload, status = handler(data, actor=principal.actor, opener_only=only_own_flows(principal))
        except Exception as exc:
            refusal = exception_handler(exc, {})
            if refusal is None:
                raise  # as from the view: Django's handler500 answers it and logs it
            payload, status = refusal.data, refusal.status_code
        response = HttpResponse(_RENDERER.render(payload), status=status, content_type="application/json")
        if refusal is not None:
            # What the exception handler adds: Retry-After (429, 503); a 503 is logged already.
            for name, value in refusal.items():
                if name.lower() != "content-type":
                    response[name] = value
            if getattr(refusal, "_has_been_logged", False):
                response._has_been_logged = True  # type: ignore[attr-defined]
        response["Allow"] = allow
        return response


def _throttle(request: HttpRequest, principal: TokenPrincipal) -> None:
    """``WriteRateThrottle`` as DRF applies it: ``Throttled`` (429) past the token's write rate."""
    throttle = WriteRateThrottle()
    if not throttle.allow_request(_Caller(request.method or "", principal), None):  # type: ignore[arg-type]
        raise exceptions.Throttled(throttle.wait())
