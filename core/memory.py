"""A worker's memory after a large request goes back to the system (docs/ingest.md, "Limits").

A bulk request (a 15 MB ingest body, 2,000 spans) allocates hundreds of megabytes of short-lived
buffers and objects. Two things kept them: glibc raises its mmap threshold to the largest block
freed (a 15 MB body), after which every buffer up to that size comes from the heap and fragments it
for good; and the database driver's buffers grow to the largest statement and never shrink. So:

* ``tune_allocator()`` (at a web worker's start, ``config.asgi``): a fixed mmap threshold, so large
  buffers are always mapped and unmapped when freed; at most two malloc arenas.
* ``freeze_startup_heap()`` (at a web worker's start, after it has loaded everything): what the
  worker loaded is moved out of the cyclic collector's reach (``gc.freeze``), so full collections
  walk only what requests allocate. A cycle among those objects freed later is never collected:
  they are modules, settings and caches that live as long as the process.
* ``ReleaseMemoryMiddleware``: after a request whose body was LARGE_BODY_BYTES or more (the bulk
  routes, rarely), drop what still holds its data, close this thread's database connections (the
  next request opens them again) and run ``gc.collect()`` and ``malloc_trim(0)``: tens of
  milliseconds, after the answer is built.
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable
from typing import Any

from django.db import connections
from django.http import HttpRequest, HttpResponse

LARGE_BODY_BYTES = 1_048_576
MMAP_THRESHOLD_BYTES = 128 * 1024
ARENA_MAX = 2
# mallopt parameters (malloc.h).
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8


def _libc() -> Any | None:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (musl, macOS): the allocator is left as it is
        return None


_LIBC = _libc()


def tune_allocator() -> bool:
    """Fix glibc's mmap threshold and cap its arenas; False where there is no glibc."""
    mallopt = getattr(_LIBC, "mallopt", None)
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(_M_ARENA_MAX, ARENA_MAX))


def freeze_startup_heap() -> int:
    """Move every object alive now (a worker's modules, URLconf, settings: ~180,000 of them) out
    of the cyclic collector's reach, as a worker finishes starting. They live as long as the
    process, and a full collection would otherwise walk them all: ~0.1 s every few hundred
    requests, about 4 % of a web worker's CPU at one flow a request. Returns how many."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def release_memory() -> None:
    gc.collect()
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)


class ReleaseMemoryMiddleware:
    """After a request with a large body, give the memory it used back (module docstring)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if _body_size(request) >= LARGE_BODY_BYTES:
            # What still holds the request's data: a DRF answer keeps its request (and so the
            # parsed body) for rendering, done by now; the body itself, read by now.
            if getattr(response, "is_rendered", True) and hasattr(response, "renderer_context"):
                response.renderer_context = {}
            for name in ("_body", "_stream", "_files", "_post", "data"):
                request.__dict__.pop(name, None)
            for connection in connections.all(initialized_only=True):
                if not connection.in_atomic_block:  # (a test's transaction stays open)
                    connection.close()
            release_memory()
        return response


def _body_size(request: HttpRequest) -> int:
    body = request.__dict__.get("_body")
    if isinstance(body, bytes):
        return len(body)
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0
