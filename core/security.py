"""Security headers every response carries (docs/api.md, "Security headers").

``SecurityHeadersMiddleware`` is the outermost middleware, so it sees every answer, including
the refusals an inner middleware answers itself (a 411 or 413 from
``core.middleware.ChunkedBodyMiddleware``) and ``handler500``'s. It sets, when the response
does not already say otherwise:

- ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: same-origin`` and
  ``X-Frame-Options: DENY``: Django's ``SecurityMiddleware`` and ``XFrameOptionsMiddleware`` set
  the same values on the responses they see; this covers the few they do not;
- ``Permissions-Policy``: no page uses a camera, microphone, location, payment or device API,
  so every one is denied (to this origin and to any frame);
- ``Cache-Control: no-store`` on every answer but the static files: pages, API answers and the
  admin carry a patient's or an operator's data, which no browser or proxy cache may keep. A
  view that sets its own ``Cache-Control`` keeps it (``never_cache`` on ``/healthz``, the public
  audit checkpoint's ``no-cache``).

The Content-Security-Policy comes from django-csp (``CONTENT_SECURITY_POLICY`` in settings).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase

# Features no page uses: each denied everywhere ("()" is the empty allow-list). Only names
# Chromium and Firefox know, so browsers log no "unrecognized feature" errors.
DENIED_FEATURES = (
    "accelerometer",
    "autoplay",
    "camera",
    "display-capture",
    "encrypted-media",
    "geolocation",
    "gyroscope",
    "hid",
    "idle-detection",
    "magnetometer",
    "microphone",
    "midi",
    "payment",
    "picture-in-picture",
    "publickey-credentials-get",
    "screen-wake-lock",
    "serial",
    "usb",
    "xr-spatial-tracking",
)
PERMISSIONS_POLICY = ", ".join(f"{feature}=()" for feature in DENIED_FEATURES)

NO_STORE = "no-store"


# The headers every answer carries unless it says otherwise (the CSP aside: django-csp's).
FIXED_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Permissions-Policy": PERMISSIONS_POLICY,
}


class SecurityHeadersMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response
        self.static_prefix = "/" + settings.STATIC_URL.strip("/") + "/"

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        headers = response.headers
        for name, value in FIXED_HEADERS.items():
            headers.setdefault(name, value)
        if "Cache-Control" not in headers and not request.path.startswith(self.static_prefix):
            headers["Cache-Control"] = NO_STORE
        return response


class AsgiSecurityHeaders:
    """The same headers on the answers of an ASGI app that Django's middleware never sees (the
    MCP server at ``/mcp``): the fixed ones, the site's Content-Security-Policy and
    ``Cache-Control: no-store``, each unless the app set it."""

    def __init__(self, app: Callable[..., Any]) -> None:
        from csp.utils import build_policy  # needs the settings: imported when the app is built

        self.app = app
        self.headers = [
            *((name.lower().encode(), value.encode()) for name, value in FIXED_HEADERS.items()),
            (b"content-security-policy", build_policy().encode()),
            (b"cache-control", NO_STORE.encode()),
        ]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        async def with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", ())}
                message = {
                    **message,
                    "headers": [*message.get("headers", ()), *(h for h in self.headers if h[0] not in present)],
                }
            await send(message)

        await self.app(scope, receive, with_headers)
