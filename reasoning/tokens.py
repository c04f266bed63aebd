"""API tokens (create, revoke, rotate with a grace period) and operator accounts, each change
audited in its transaction.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.actions import Action
from audit.services import record
from core.errors import Conflict, InvalidInput, NotFound
from patients.models import Patient
from reasoning.auth import TOKEN_PREFIX, hash_token, token_cache
from reasoning.models import ApiToken


@transaction.atomic
def create_api_token(
    *,
    name: str,
    scopes: Iterable[str],
    actor: str,
    expires_at: datetime | None = None,
    patient_id: uuid.UUID | None = None,
) -> tuple[ApiToken, str]:
    """Create a token; return it with the raw secret, which is never stored or shown again.

    A token bound to a patient may carry only ``reasoning.read``: it is the patient's
    app reading that patient's narratives.
    """
    scopes = sorted(set(scopes))
    unknown = [scope for scope in scopes if scope not in ApiToken.Scope.values]
    if unknown:
        raise InvalidInput(f"unknown scope(s): {', '.join(unknown)}", field="scopes")
    if not scopes:
        raise InvalidInput("at least one scope is required", field="scopes")
    if patient_id is not None:
        if scopes != [ApiToken.Scope.READ]:
            raise InvalidInput("a patient-bound token may carry only the reasoning.read scope", field="scopes")
        if not Patient.objects.filter(pk=patient_id).exists():
            raise InvalidInput("unknown patient", field="patient_id")
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    try:
        with transaction.atomic():  # a savepoint: the unique name decides concurrent creations
            token = ApiToken.objects.create(
                name=name,
                token_hash=hash_token(raw),
                prefix=raw[:12],
                scopes=scopes,
                expires_at=expires_at,
                patient_id=patient_id,
            )
    except IntegrityError:
        raise Conflict(f"a token named {name!r} already exists", field="name") from None
    record(
        Action.API_TOKEN_CREATED,
        actor=actor,
        target=token,
        payload={"scopes": scopes, "expires": expires_at is not None, "patient_bound": patient_id is not None},
    )
    return token, raw


@transaction.atomic
def revoke_api_token(*, name: str, actor: str) -> ApiToken:
    updated = ApiToken.objects.filter(name=name, revoked_at__isnull=True).update(revoked_at=timezone.now())
    token = ApiToken.objects.filter(name=name).first()
    if token is None:
        raise NotFound(f"no token named {name!r}")
    if not updated:
        raise Conflict(f"token {name!r} is already revoked")
    record(Action.API_TOKEN_REVOKED, actor=actor, target=token)
    # This process forgets it at once (a rollback only costs a cache miss); the others
    # within API_TOKEN_CACHE_SECONDS.
    token_cache.clear()
    return token


# How long a rotated-out secret keeps working, unless the caller says otherwise.
ROTATION_GRACE = timedelta(hours=24)


@transaction.atomic
def rotate_api_token(*, name: str, actor: str, grace: timedelta = ROTATION_GRACE) -> tuple[ApiToken, str]:
    """Give a token a new secret; return it with the raw secret (shown once). The old secret
    keeps working for ``grace`` (0: not at all), so agents can switch without a gap; a secret
    rotated out earlier stops at once. Name, scopes and the flows it opened stay. Audited as
    ``auth.api_token.rotated``."""
    if grace < timedelta(0):
        raise InvalidInput("must not be negative", field="grace")
    token = ApiToken.objects.select_for_update().filter(name=name).first()
    if token is None:
        raise NotFound(f"no token named {name!r}")
    if token.revoked_at is not None:
        raise Conflict(f"token {name!r} is revoked; create a new one")
    now = timezone.now()
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token.previous_token_hash = token.token_hash
    token.previous_valid_until = now + grace
    token.token_hash = hash_token(raw)
    token.prefix = raw[:12]
    token.rotated_at = now
    token.save(update_fields=["previous_token_hash", "previous_valid_until", "token_hash", "prefix", "rotated_at"])
    record(
        Action.API_TOKEN_ROTATED,
        actor=actor,
        target=token,
        payload={"grace_seconds": int(grace.total_seconds())},
    )
    token_cache.clear()  # this process at once; the others within API_TOKEN_CACHE_SECONDS
    return token, raw


@transaction.atomic
def create_operator(*, username: str, password: str, actor: str, superuser: bool = True) -> Any:
    """A staff login for operators (the operator pages; Django admin too when ``superuser``).

    A superuser holds every permission, reading steps' decrypted content and raw reasoning
    included (Django's rule); an operator created with ``superuser=False`` reads metadata only
    until ``set_operator_access`` grants more."""
    user_model = get_user_model()
    taken = Conflict(f"user {username!r} already exists", field="username")
    if user_model.objects.filter(username=username).exists():
        raise taken
    try:
        with transaction.atomic():  # a savepoint: the unique username decides concurrent creations
            if superuser:
                user = user_model.objects.create_superuser(username=username, password=password)
            else:
                user = user_model.objects.create_user(username=username, password=password, is_staff=True)
    except IntegrityError:
        raise taken from None
    record(Action.OPERATOR_CREATED, actor=actor, target=("auth.user", user.pk), payload={"superuser": superuser})
    return user


# What an operator may read beyond metadata on the flow page (ReasoningStep's permissions).
OPERATOR_ACCESS = {"content": "read_step_content", "reasoning": "read_step_reasoning"}


@transaction.atomic
def set_operator_access(user: Any, *, actor: str, **access: bool) -> None:
    """Grant (True) or revoke (False) an operator's reading of steps' decrypted content
    (``content``) or raw reasoning (``reasoning``); audited with what changed, by name."""
    unknown = sorted(set(access) - set(OPERATOR_ACCESS))
    if unknown:
        raise InvalidInput(f"unknown access {unknown}; known: {sorted(OPERATOR_ACCESS)}", field="access")
    if not getattr(user, "is_staff", False):
        raise InvalidInput("only an operator (a staff login) is given access", field="user")
    permissions = {
        p.codename: p
        for p in Permission.objects.filter(content_type__app_label="reasoning", codename__in=OPERATOR_ACCESS.values())
    }
    for name, allowed in access.items():
        permission = permissions[OPERATOR_ACCESS[name]]
        (user.user_permissions.add if allowed else user.user_permissions.remove)(permission)
    changed = dict(sorted(access.items()))
    record(Action.OPERATOR_ACCESS_CHANGED, actor=actor, target=("auth.user", user.pk), payload=changed)
    # Django caches a user's permissions on the object: the next check must see the change.
    for cache in ("_perm_cache", "_user_perm_cache"):
        user.__dict__.pop(cache, None)
