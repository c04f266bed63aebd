"""Request-body plumbing that must run before anything reads the body."""

from __future__ import annotations

import io
import zlib
from collections.abc import Callable

from django.conf import settings
from django.core.handlers.wsgi import LimitedStream, WSGIRequest
from django.http import HttpRequest, HttpResponse, JsonResponse


class ChunkedBodyMiddleware:
    """Read a ``Transfer-Encoding`` (chunked) body, or refuse it — never see it as empty;
    and read the bulk routes' larger, possibly gzip-encoded bodies (``_read_bulk_body``).

    Django sizes a WSGI body by ``CONTENT_LENGTH`` alone, and a chunked request has none, so
    without this a chunked ``{"trigger_type": "no_such_type"}`` reads as ``{}``. What each
    server hands us:

    1. gunicorn (and other servers that decode chunked input) set ``wsgi.input_terminated``:
       ``wsgi.input`` yields the decoded body and then EOF. We read it, bounded by
       ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (413 beyond), and present it with its length.
    2. Servers that pass the raw chunked stream (Django's runserver and the test live server,
       wsgiref) leave the flag unset: we cannot tell where the body ends, so 411.

    ASGI requests are read whole by Django whatever their framing, so they pass untouched.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if isinstance(request, WSGIRequest) and request.path in settings.BULK_BODY_PATHS:
            refusal = _read_bulk_body(request)
            if refusal is not None:
                return refusal
        elif isinstance(request, WSGIRequest) and _has_transfer_coding(request.environ):
            refusal = _read_whole_body(request, settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
            if refusal is not None:
                return refusal
        return self.get_response(request)


def _has_transfer_coding(environ: dict[str, object]) -> bool:
    coding = str(environ.get("HTTP_TRANSFER_ENCODING", "")).strip().lower()
    return coding not in ("", "identity")


def _too_large(request: HttpRequest | None = None) -> HttpResponse:
    return _refusal(request, 413, "Request body is too large.")


# OTLP/HTTP answers errors with a google.rpc.Status in the request's encoding.
_OTLP_PATH = "/v1/traces"
_RPC_CODES = {400: 3, 411: 3, 413: 3, 415: 3}


def _refusal(request: HttpRequest | None, status: int, message: str) -> HttpResponse:
    if request is None or request.path != _OTLP_PATH:
        return JsonResponse({"detail": message}, status=status)
    from google.rpc.status_pb2 import Status

    answer = Status(code=_RPC_CODES.get(status, 2), message=message)
    if request.META.get("CONTENT_TYPE", "").split(";")[0].strip().lower() == "application/x-protobuf":
        return HttpResponse(answer.SerializeToString(), status=status, content_type="application/x-protobuf")
    return JsonResponse({"code": answer.code, "message": message}, status=status)


def _read_bulk_body(request: WSGIRequest) -> HttpResponse | None:
    """The bulk write routes: read the body whole (chunked or framed), bounded by
    ``INGEST_MAX_BYTES``, and decode ``Content-Encoding: gzip`` (bounded the same way, so a
    small bomb cannot inflate past it). The view sees the plain body as ``request.body``."""
    limit = settings.INGEST_MAX_BYTES
    encoding = request.META.get("HTTP_CONTENT_ENCODING", "").strip().lower()
    if encoding not in ("", "identity", "gzip"):
        return _refusal(request, 415, f"Unsupported Content-Encoding {encoding!r}: send gzip or no encoding.")
    if _has_transfer_coding(request.environ):
        refusal = _read_whole_body(request, limit)
        if refusal is not None:
            return refusal
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return _refusal(request, 400, "Invalid Content-Length.")
    if length > limit:
        return _too_large(request)
    body = request.read(length) if length else b""
    if encoding == "gzip":
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            body = inflater.decompress(body, limit + 1)
        except zlib.error:
            return _refusal(request, 400, "Content-Encoding is gzip but the body is not valid gzip.")
        if len(body) > limit or inflater.unconsumed_tail:
            return _too_large(request)
        if not inflater.eof:
            return _refusal(request, 400, "The gzip body is truncated.")
        del request.META["HTTP_CONTENT_ENCODING"]
    request.META["CONTENT_LENGTH"] = str(len(body))
    # HttpRequest.body returns this without Django's DATA_UPLOAD_MAX_MEMORY_SIZE check.
    request._body = body
    request._stream = LimitedStream(io.BytesIO(body), len(body))  # type: ignore[assignment]  # stub says BinaryIO
    return None


def _read_whole_body(request: WSGIRequest, limit: int | None) -> HttpResponse | None:
    environ = request.environ
    if not environ.get("wsgi.input_terminated"):
        return _refusal(request, 411, "Chunked request bodies are not supported by this server; send Content-Length.")
    stream = environ["wsgi.input"]
    body = stream.read() if limit is None else stream.read(limit + 1)
    if limit is not None and len(body) > limit:
        return _too_large(request)
    # From here on the request looks like one that came with Content-Length: Django's own
    # size checks, form parsing and DRF's parsers all read these two.
    request.META["CONTENT_LENGTH"] = str(len(body))
    request._stream = LimitedStream(io.BytesIO(body), len(body))  # type: ignore[assignment]  # stub says BinaryIO
    return None
