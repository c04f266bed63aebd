"""Labels: identifiers such as trigger types, step kinds, agents and outcome types.

A plain module (no DRF) so that domain code (the matcher, the dispatcher) can check a
label without importing an API layer.
"""

from __future__ import annotations

from django.core.validators import RegexValidator

# Labels (trigger types, step kinds, agents, outcome types) are identifiers, not prose:
# restricting their alphabet keeps free text (and so PHI) out of metrics and audit payloads.
LABEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$"
LABEL_RULE = (
    "A label: letters, digits and _ . : / - only ([A-Za-z0-9_.:/-]), starting with a letter or digit, "
    "e.g. `dispatcher_gave_up`."
)


class LabelValidator(RegexValidator):
    """The label rule; its message says what a label is, so a caller can fix a rejected value."""

    # Read by core.api_views.AutoSchema: every label field's OpenAPI description states the rule.
    openapi_description = LABEL_RULE

    def __init__(self) -> None:
        super().__init__(
            LABEL_PATTERN,
            "Must be a label matching [A-Za-z0-9_.:/-] (letters, digits and _ . : / -, starting with a letter "
            "or digit), e.g. dispatcher_gave_up: a label, not a sentence.",
        )


label_validator = LabelValidator()


def label_schema(*, max_length: int = 100, empty_allowed: bool = False) -> dict[str, object]:
    """The OpenAPI schema of a query or path parameter the server checks with the label rule;
    ``empty_allowed`` for a filter whose empty value (a form's empty field) means no filter."""
    pattern = f"^(?:{LABEL_PATTERN[1:-1]})?$" if empty_allowed else LABEL_PATTERN
    return {"type": "string", "maxLength": max_length, "pattern": pattern}
