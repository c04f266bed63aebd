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

The Content-Security-Policy comes from django-csp (``CONTENT_SECURITY_POLICY`` in settings),
through ``ContentSecurityPolicyMiddleware``: the library's middleware, with the policy of the
settings built once rather than at every answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from csp.constants import HEADER
from csp.middleware import CheckableLazyObject, CSPMiddleware
from csp.utils import build_policy
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


# What django-csp's decorators set on an answer that brings a policy of its own.
_OWN_POLICY = ("_csp_config", "_csp_update", "_csp_replace", "_csp_config_ro", "_csp_update_ro", "_csp_replace_ro")


class ContentSecurityPolicyMiddleware(CSPMiddleware):
    """django-csp's middleware, the settings' policy built once per process.

    The library builds the header from the settings at every answer (~5 % of the CPU of a small
    API request). An answer that brings no policy of its own (none of django-csp's decorators
    set one), to a request that made no nonce, gets the string built when the process started;
    the library adds that same string. Any other answer, and every answer when a report-only
    policy, an excluded prefix or ``DEBUG`` is set, goes through the library's own path."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        super().__init__(get_response)
        self.policy = build_policy()
        configured = getattr(settings, "CONTENT_SECURITY_POLICY", None) or {}
        self.built_once = bool(
            self.policy
            and not build_policy(report_only=True)
            and not configured.get("EXCLUDE_URL_PREFIXES")
            and not settings.DEBUG
        )

    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        if (
            not self.built_once
            or getattr(request, "_csp_nonce", None) is not None
            or any(getattr(response, name, None) is not None for name in _OWN_POLICY)
        ):
            return super().process_response(request, response)
        if HEADER not in response and not getattr(response, "_csp_exempt", False):
            response[HEADER] = self.policy
        # As the library does: a nonce asked for after the header is written is an error.
        request.csp_nonce = CheckableLazyObject(self._csp_nonce_post_response)  # type: ignore[attr-defined]
        return response


class AsgiSecurityHeaders:
    """The same headers on the answers of an ASGI app that Django's middleware never sees (the
    MCP server at ``/mcp``): the fixed ones, the site's Content-Security-Policy and
    ``Cache-Control: no-store``, each unless the app set it."""

    def __init__(self, app: Callable[..., Any]) -> None:
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
