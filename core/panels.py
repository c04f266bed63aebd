"""Pages composed of panels that several apps own.

A page has a name (``"research-console"``). Each app that shows a panel on it registers,
in its ``AppConfig.ready()``, a function that builds the panel's template context from
the request. The page's view merges every registered context (``page_context``) and its
template includes each panel's template by name, so the app that owns the page never
imports the apps that own its panels (the console lives in ``research_backlog``; its
pathway candidates come from ``pathways``).

A panel may put ``PANEL_STATUS`` in its context (e.g. 400 for a search it refused); the
page answers with the highest status any panel asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.http import HttpRequest

PanelContext = Callable[[HttpRequest], Mapping[str, Any]]
PANEL_STATUS = "panel_status"

_panels: dict[str, dict[str, PanelContext]] = {}


def register_panel(page: str, name: str, context: PanelContext) -> None:
    """Show ``name`` on ``page``; registering the same name again replaces it (idempotent)."""
    _panels.setdefault(page, {})[name] = context


def page_context(page: str, request: HttpRequest) -> tuple[dict[str, Any], int]:
    """Every panel's context merged, in registration order, and the page's status."""
    merged: dict[str, Any] = {}
    status = 200
    for context in _panels.get(page, {}).values():
        panel = dict(context(request))
        status = max(status, int(panel.pop(PANEL_STATUS, 200)))
        merged.update(panel)
    return merged, status
