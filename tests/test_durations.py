"""``core.templatetags.durations``: the one way pages write durations and ages."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.template import Context, Template

from core.templatetags.durations import format_duration


@pytest.mark.parametrize(
    ("seconds", "precise", "coarse"),
    [
        (0.25, "250 ms", "0 s"),
        (1.5, "1.5 s", "1 s"),
        (184, "3 min 4 s", "3 min"),
        (7500, "2 h 5 min", "2 h 5 min"),
        (97200, "1 d 3 h", "1 d 3 h"),
        (-5, "0 ms", "0 s"),
    ],
)
def test_both_styles(seconds: float, precise: str, coarse: str) -> None:
    assert format_duration(seconds) == precise
    assert format_duration(timedelta(seconds=seconds)) == precise
    assert format_duration(seconds, "coarse") == coarse


def test_templates_load_the_filter_without_an_app() -> None:
    rendered = Template('{% load durations %}{{ a|duration }} / {{ b|duration:"coarse" }} / {{ c|duration }}').render(
        Context({"a": 1.5, "b": 184, "c": None})
    )

    assert rendered == "1.5 s / 3 min / "
