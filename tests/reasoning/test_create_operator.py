"""reasoning.tokens.create_operator: a staff login, audited; a taken username is a 409."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from audit.models import AuditEvent
from core.errors import Conflict
from reasoning.tokens import create_operator

pytestmark = pytest.mark.django_db

ACTOR = "system:test"
CREATED = "auth.operator.created"


def test_create_operator_makes_a_staff_login_and_audits_it() -> None:
    user = create_operator(username="olivia", password="pw-olivia-1", actor=ACTOR)

    assert (user.is_staff, user.is_superuser, user.check_password("pw-olivia-1")) == (True, True, True)
    (event,) = AuditEvent.objects.filter(action=CREATED)
    assert (event.actor, event.target_type, event.target_id) == (ACTOR, "auth.user", str(user.pk))


def test_taken_username_is_a_conflict_on_the_username() -> None:
    get_user_model().objects.create_user(username="olivia", password="pw-first-1")

    with pytest.raises(Conflict) as caught:
        create_operator(username="olivia", password="pw-olivia-1", actor=ACTOR)

    assert (caught.value.detail, caught.value.field) == ("user 'olivia' already exists", "username")
    assert not AuditEvent.objects.filter(action=CREATED).exists()


def test_username_taken_between_the_check_and_the_insert_is_the_same_conflict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    manager = get_user_model().objects
    real_create = manager.create_superuser

    def rival_first(**fields: Any) -> Any:
        # A concurrent create_operator for the same name inserts after our exists-check.
        real_create(username=fields["username"], password="pw-rival-1")
        return real_create(**fields)

    monkeypatch.setattr(manager, "create_superuser", rival_first)

    with pytest.raises(Conflict) as caught:
        create_operator(username="olivia", password="pw-olivia-1", actor=ACTOR)

    assert (caught.value.detail, caught.value.field) == ("user 'olivia' already exists", "username")
    assert not AuditEvent.objects.filter(action=CREATED).exists()
    # The unique violation was contained in a savepoint: the caller's transaction still works.
    assert not get_user_model().objects.filter(username="olivia").exists()
