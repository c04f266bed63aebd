"""One way to write a duration or an age on every page: ``{% load durations %}``.

``{{ seconds|duration }}`` is precise ("250 ms", "1.5 s", "3 min 4 s", "2 h 5 min",
"1 d 3 h"); ``{{ seconds|duration:"coarse" }}`` is for ages of waiting work ("45 s",
"3 min", "2 h 5 min", "1 d 3 h"). Registered in TEMPLATES' ``libraries`` (``core`` is no
app); views that build the text in Python call ``format_duration``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django import template
from django.utils import timezone

register = template.Library()


def format_duration(value: float | timedelta, style: str = "precise") -> str:
    seconds = max(value.total_seconds() if isinstance(value, timedelta) else float(value), 0.0)
    if style == "coarse":
        seconds = float(int(seconds))
        if seconds < 60:
            return f"{seconds:.0f} s"
        if seconds < 3600:
            return f"{int(seconds) // 60} min"
    else:
        if seconds < 1:
            return f"{seconds * 1000:.0f} ms"
        if seconds < 60:
            return f"{seconds:.1f} s"
        if seconds < 3600:
            minutes, rest = divmod(int(seconds), 60)
            return f"{minutes} min {rest} s"
    minutes = int(seconds) // 60
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


@register.filter(name="duration")
def duration_filter(value: float | timedelta | None, style: str = "precise") -> str:
    return "" if value is None else format_duration(value, style)


@register.filter(name="age")
def age_filter(moment: datetime | None, now: datetime | None = None) -> str:
    """How long ago, coarsely and consistently: "just now", "3 min ago", "5 h ago", "2 d ago"."""
    if moment is None:
        return ""
    seconds = ((now or timezone.now()) - moment).total_seconds()
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h ago"
    return f"{int(seconds // 86400)} d ago"
