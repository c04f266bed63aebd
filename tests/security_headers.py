"""The security headers every answer must carry, as the tests check them (core/security.py,
django-csp; docs/api.md, "Security headers"): tests/test_security_headers.py walks every URL pattern,
tests/test_access_matrix.py checks every answer of the access matrix (every route as every
persona: the 200s and the refusals)."""

from __future__ import annotations

from typing import Any

CSP_DIRECTIVES = {
    "default-src": {"'self'"},
    "script-src": {"'self'"},
    "style-src": {"'self'"},
    "img-src": {"'self'", "data:"},
    "object-src": {"'none'"},
    "base-uri": {"'none'"},
    "form-action": {"'self'"},
    "frame-ancestors": {"'none'"},
}
DENIED = ("camera", "microphone", "geolocation", "payment", "usb", "serial", "hid", "display-capture")
# A view that set its own Cache-Control keeps it: the public audit checkpoint may be stored and revalidated.
OWN_CACHE_CONTROL = {"/audit/v1/checkpoint": "no-cache"}


def csp_directives(header: str) -> dict[str, set[str]]:
    directives: dict[str, set[str]] = {}
    for part in header.split(";"):
        name, *sources = part.split()
        directives[name] = set(sources)
    return directives


def assert_security_headers(response: Any, path: str) -> None:
    where = f"{response.status_code} for {path}"
    assert "Content-Security-Policy" in response, f"no CSP on the {where}"
    assert csp_directives(response["Content-Security-Policy"]) == CSP_DIRECTIVES, where
    assert response["X-Content-Type-Options"] == "nosniff", where
    assert response["Referrer-Policy"] == "same-origin", where
    assert response["X-Frame-Options"] == "DENY", where
    allowed = {
        name.strip(): value
        for name, _, value in (item.partition("=") for item in response["Permissions-Policy"].split(","))
    }
    for feature in DENIED:
        assert allowed.get(feature) == "()", f"{feature} is not denied on the {where}: {allowed}"
    cache_control = response.get("Cache-Control", "")
    if path in OWN_CACHE_CONTROL and response.status_code == 200:
        assert cache_control == OWN_CACHE_CONTROL[path], where
    else:
        assert "no-store" in cache_control, f"Cache-Control {cache_control!r} on the {where}"
