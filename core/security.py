"""Security headers every response carries (README "Security headers").

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


class SecurityHeadersMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response
        self.static_prefix = "/" + settings.STATIC_URL.strip("/") + "/"

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        headers = response.headers
        headers.setdefault("X-Content-Type-Options", "nosniff")
        headers.setdefault("Referrer-Policy", "same-origin")
        headers.setdefault("X-Frame-Options", "DENY")
        headers.setdefault("Permissions-Policy", PERMISSIONS_POLICY)
        if "Cache-Control" not in headers and not request.path.startswith(self.static_prefix):
            headers["Cache-Control"] = NO_STORE
        return response
