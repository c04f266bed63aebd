"""Logins: throttling, their audit events, and session hardening (audit/logins.py).

After 10 failures for one username, or from one client address, every login for it is refused
(429, a page saying when to retry) for LOGIN_LOCKOUT_MINUTES, the right password included, on
the site's form and Django admin's. Each attempt and logout is audited without the password or
a typed username. An operator session idle for OPERATOR_SESSION_IDLE_MINUTES is logged out;
Django rotates the session key at login and ends every session when the password changes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.test import Client
from django.urls import reverse

from audit.logins import LAST_SEEN_KEY, address_digest, username_digest
from audit.models import AuditEvent
from patients.models import Patient
from tests.conftest import events
from tests.factories import PASSWORD

pytestmark = pytest.mark.django_db

SITE_LOGIN = "/accounts/login/"
ADMIN_LOGIN = "/admin/login/"
OPERATOR = "olive.operator"
PATIENT = "ada.patient"
OPERATOR_PAGE = "/dashboard/admin/reasoning/"
PATIENT_PAGE = "/dashboard/profile"
WRONG = "Wrong-Pass-Quixote-{}"  # distinctive: a leak into the trail cannot be a coincidence
UNKNOWN = "zebulon.nobody"
LIMIT = 10
REPO_ROOT = Path(__file__).resolve().parents[1]


def attempt(client: Client, path: str, username: str, password: str, address: str = "127.0.0.1") -> Any:
    return client.post(path, {"username": username, "password": password}, REMOTE_ADDR=address)


def fail(client: Client, path: str, username: str, times: int, address: str = "127.0.0.1") -> None:
    for n in range(times):
        response = attempt(client, path, username, WRONG.format(n), address)
        assert response.status_code in (200, 429), response.status_code


def logged_in_as(client: Client) -> str | None:
    value = client.session.get("_auth_user_id")
    return str(value) if value is not None else None


@pytest.fixture
def clock_start() -> datetime:
    return datetime.now(UTC)


# --- Throttling ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [SITE_LOGIN, ADMIN_LOGIN], ids=["site", "admin"])
def test_ten_failures_lock_the_form_even_for_the_right_password(operator_user: User, path: str) -> None:
    client = Client()
    for n in range(LIMIT - 1):
        assert attempt(client, path, OPERATOR, WRONG.format(n)).status_code == 200  # the form again

    locked = attempt(client, path, OPERATOR, WRONG.format(LIMIT))
    right = attempt(client, path, OPERATOR, PASSWORD)

    assert locked.status_code == 429
    assert right.status_code == 429
    assert logged_in_as(client) is None
    page = right.content.decode()
    assert "Too many login attempts" in page
    assert "try again after" in page
    assert "UTC" in page
    assert 0 < int(right["Retry-After"]) <= 15 * 60 + 1


@pytest.mark.parametrize("path", [SITE_LOGIN, ADMIN_LOGIN], ids=["site", "admin"])
def test_nine_failures_do_not_lock(operator_user: User, path: str) -> None:
    client = Client()
    fail(client, path, OPERATOR, LIMIT - 1)

    response = attempt(client, path, OPERATOR, PASSWORD)

    assert response.status_code == 302
    assert logged_in_as(client) == str(operator_user.pk)


def test_failures_on_either_form_count_together(operator_user: User) -> None:
    client = Client()
    fail(client, SITE_LOGIN, OPERATOR, 5)
    fail(client, ADMIN_LOGIN, OPERATOR, 5)

    assert attempt(client, SITE_LOGIN, OPERATOR, PASSWORD).status_code == 429
    assert attempt(client, ADMIN_LOGIN, OPERATOR, PASSWORD).status_code == 429


def test_one_address_is_locked_across_usernames(operator_user: User) -> None:
    attacker = "203.0.113.9"
    for n in range(LIMIT):
        attempt(Client(), SITE_LOGIN, f"guess-{n}", WRONG.format(n), attacker)

    from_attacker = Client()
    elsewhere = Client()

    assert attempt(from_attacker, SITE_LOGIN, OPERATOR, PASSWORD, attacker).status_code == 429
    assert logged_in_as(from_attacker) is None
    # The username itself has no failures: from another address it logs in.
    assert attempt(elsewhere, SITE_LOGIN, OPERATOR, PASSWORD, "198.51.100.7").status_code == 302
    assert logged_in_as(elsewhere) == str(operator_user.pk)


def test_one_username_is_locked_across_addresses(operator_user: User, consenting_patient: Patient) -> None:
    for n in range(LIMIT):
        attempt(Client(), SITE_LOGIN, OPERATOR, WRONG.format(n), f"203.0.113.{n + 1}")

    # The username is locked from a fresh address too ...
    assert attempt(Client(), SITE_LOGIN, OPERATOR, PASSWORD, "198.51.100.7").status_code == 429
    # ... but another user logs in from an address that tried it.
    patient = Client()
    assert attempt(patient, SITE_LOGIN, PATIENT, PASSWORD, "203.0.113.1").status_code == 302
    assert consenting_patient.user is not None
    assert logged_in_as(patient) == str(consenting_patient.user.pk)


def test_x_forwarded_for_does_not_dodge_the_address_lockout(operator_user: User) -> None:
    client = Client()
    for n in range(LIMIT):
        client.post(
            SITE_LOGIN,
            {"username": f"guess-{n}", "password": WRONG.format(n)},
            REMOTE_ADDR="203.0.113.9",
            HTTP_X_FORWARDED_FOR=f"10.0.0.{n}",
        )

    response = client.post(
        SITE_LOGIN,
        {"username": OPERATOR, "password": PASSWORD},
        REMOTE_ADDR="203.0.113.9",
        HTTP_X_FORWARDED_FOR="10.9.9.9",
    )

    assert response.status_code == 429


def test_the_lockout_ends_after_the_configured_time(operator_user: User, clock: Any) -> None:
    client = Client()
    fail(client, SITE_LOGIN, OPERATOR, LIMIT)

    clock.shift(timedelta(minutes=14, seconds=50))
    assert attempt(client, SITE_LOGIN, OPERATOR, PASSWORD).status_code == 429
    # Refused attempts do not prolong it: it ends 15 minutes after the failure that caused it.
    clock.shift(timedelta(seconds=11))
    assert attempt(client, SITE_LOGIN, OPERATOR, PASSWORD).status_code == 302
    assert logged_in_as(client) == str(operator_user.pk)


def test_a_longer_lockout_is_honoured(operator_user: User, clock: Any, settings: Any) -> None:
    settings.LOGIN_LOCKOUT_MINUTES = 60
    settings.AXES_COOLOFF_TIME = timedelta(minutes=60)
    client = Client()
    fail(client, SITE_LOGIN, OPERATOR, LIMIT)

    clock.shift(timedelta(minutes=30))
    refused = attempt(client, SITE_LOGIN, OPERATOR, PASSWORD)
    assert refused.status_code == 429
    assert 29 * 60 <= int(refused["Retry-After"]) <= 30 * 60 + 1
    clock.shift(timedelta(minutes=30, seconds=1))
    assert attempt(client, SITE_LOGIN, OPERATOR, PASSWORD).status_code == 302


def test_failures_spread_beyond_the_window_do_not_lock(operator_user: User, clock: Any) -> None:
    client = Client()
    fail(client, SITE_LOGIN, OPERATOR, LIMIT - 1)
    clock.shift(timedelta(minutes=16))
    fail(client, SITE_LOGIN, OPERATOR, LIMIT - 1)

    assert attempt(client, SITE_LOGIN, OPERATOR, PASSWORD).status_code == 302


SETUP = "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE','config.settings'); django.setup()"


@pytest.mark.parametrize(
    ("variable", "value"),
    [("LOGIN_LOCKOUT_MINUTES", "5"), ("LOGIN_LOCKOUT_MINUTES", "soon"), ("OPERATOR_SESSION_IDLE_MINUTES", "0")],
)
def test_bad_login_settings_stop_start_up_naming_the_variable(variable: str, value: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SETUP],
        env={**os.environ, variable: value},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr
    assert variable in done.stderr


# --- Audit -----------------------------------------------------------------------------------


def assert_no_secrets(*texts: str) -> None:
    """No password, wrong password or typed username in any event's payload or canonical bytes."""
    for event in AuditEvent.objects.all():
        stored = json.dumps(event.payload) + bytes(event.canonical).decode()
        assert PASSWORD not in stored
        assert "Wrong-Pass-Quixote" not in stored
        assert "127.0.0.1" not in stored and "203.0.113.5" not in stored  # addresses only as digests
        for text in texts:
            assert text not in stored, (event.action, text)


def test_failures_and_the_lockout_are_audited_by_user_id(operator_user: User) -> None:
    client = Client()
    fail(client, SITE_LOGIN, OPERATOR, LIMIT)
    attempt(client, ADMIN_LOGIN, OPERATOR, PASSWORD)

    counts = Counter(AuditEvent.objects.filter(action__startswith="auth.login.").values_list("action", flat=True))
    assert counts == {"auth.login.failed": LIMIT, "auth.login.locked": 2}
    failed = events("auth.login.failed")
    assert {(e.actor, e.target_type, e.target_id) for e in failed} == {
        ("anonymous", "auth.user", str(operator_user.pk))
    }
    assert failed[0].payload == {"form": "site", "client_address_hmac": address_digest("127.0.0.1"), "known_user": True}
    began, refused = events("auth.login.locked")
    assert began.target_id == str(operator_user.pk)
    assert began.payload == {
        "form": "site",
        "client_address_hmac": address_digest("127.0.0.1"),
        "known_user": True,
        "refused": False,
        "failures": LIMIT,
        "failure_limit": LIMIT,
        "lockout_minutes": 15,
    }
    assert refused.payload == {
        "form": "admin",
        "client_address_hmac": address_digest("127.0.0.1"),
        "known_user": True,
        "refused": True,
        "failure_limit": LIMIT,
        "lockout_minutes": 15,
    }
    assert not events("auth.login.succeeded")
    assert_no_secrets(OPERATOR)


def test_an_unknown_username_is_audited_by_a_digest_never_by_name(db: None) -> None:
    client = Client()
    attempt(client, SITE_LOGIN, UNKNOWN, WRONG.format(0), "203.0.113.5")
    attempt(client, ADMIN_LOGIN, "  Zebulon.NOBODY ", WRONG.format(1), "203.0.113.5")

    first, second = events("auth.login.failed")
    assert first.target_type == first.target_id == ""
    assert first.payload == {
        "form": "site",
        "client_address_hmac": address_digest("203.0.113.5"),
        "username_sha256": username_digest(UNKNOWN),
        "known_user": False,
    }
    # The same name in another case or with spaces reads the same.
    assert second.payload["username_sha256"] == first.payload["username_sha256"]
    assert len(first.payload["username_sha256"]) == 12
    assert_no_secrets(UNKNOWN, "zebulon", "Zebulon")


def test_a_login_and_a_logout_are_audited(operator_user: User) -> None:
    client = Client()
    assert attempt(client, SITE_LOGIN, OPERATOR, PASSWORD).status_code == 302
    client.post("/accounts/logout/")

    (login,) = events("auth.login.succeeded")
    assert (login.actor, login.target_type, login.target_id) == (
        f"user:{operator_user.pk}",
        "auth.user",
        str(operator_user.pk),
    )
    assert login.payload == {"form": "site", "client_address_hmac": address_digest("127.0.0.1"), "staff": True}
    (logout,) = events("auth.logout")
    assert logout.actor == f"user:{operator_user.pk}"
    assert logout.payload == {"reason": "user", "client_address_hmac": address_digest("127.0.0.1"), "staff": True}
    assert logged_in_as(client) is None
    assert_no_secrets(OPERATOR)


def test_an_admin_login_is_audited_as_the_admin_form(consenting_patient: Patient, operator_user: User) -> None:
    client = Client()
    assert attempt(client, ADMIN_LOGIN, OPERATOR, PASSWORD).status_code == 302

    (login,) = events("auth.login.succeeded")
    assert login.payload["form"] == "admin"


# --- Sessions --------------------------------------------------------------------------------


def test_an_idle_operator_session_is_logged_out(operator_user: User, clock: Any) -> None:
    client = Client()
    assert attempt(client, SITE_LOGIN, OPERATOR, PASSWORD).status_code == 302

    clock.shift(timedelta(minutes=29))
    assert client.get(OPERATOR_PAGE).status_code == 200
    clock.shift(timedelta(minutes=29))  # 58 minutes after login, 29 after the last request
    assert client.get(OPERATOR_PAGE).status_code == 200
    clock.shift(timedelta(minutes=30))
    response = client.get(OPERATOR_PAGE)

    assert response.status_code == 302
    assert response["Location"].startswith(f"{reverse('login')}?next=")
    assert logged_in_as(client) is None
    (logout,) = events("auth.logout")
    assert logout.payload["reason"] == "idle_timeout"
    assert logout.actor == f"user:{operator_user.pk}"


def test_the_idle_timeout_is_settable(operator_user: User, clock: Any, settings: Any) -> None:
    settings.OPERATOR_SESSION_IDLE_MINUTES = 5
    client = Client()
    attempt(client, SITE_LOGIN, OPERATOR, PASSWORD)

    clock.shift(timedelta(minutes=4))
    assert client.get(OPERATOR_PAGE).status_code == 200
    clock.shift(timedelta(minutes=5))
    assert client.get(OPERATOR_PAGE).status_code == 302


def test_an_idle_admin_session_is_logged_out_too(operator_user: User, clock: Any) -> None:
    client = Client()
    attempt(client, ADMIN_LOGIN, OPERATOR, PASSWORD)
    assert client.get("/admin/").status_code == 200

    clock.shift(timedelta(minutes=31))

    assert client.get("/admin/").status_code == 302


def test_a_patient_session_has_no_idle_timeout(consenting_patient: Patient, clock: Any) -> None:
    client = Client()
    assert attempt(client, SITE_LOGIN, PATIENT, PASSWORD).status_code == 302

    clock.shift(timedelta(hours=3))

    assert client.get(PATIENT_PAGE).status_code == 200
    assert LAST_SEEN_KEY not in client.session
    assert not events("auth.logout")


def test_the_session_key_is_rotated_at_login(operator_user: User) -> None:
    client = Client()
    session = client.session
    session["before_login"] = True
    session.save()
    before = session.session_key
    assert before is not None and Session.objects.filter(session_key=before).exists()

    assert attempt(client, SITE_LOGIN, OPERATOR, PASSWORD).status_code == 302

    after = client.cookies["sessionid"].value
    assert after != before
    assert not Session.objects.filter(session_key=before).exists()
    assert client.get(OPERATOR_PAGE).status_code == 200


def test_a_password_change_logs_out_every_session(operator_user: User) -> None:
    office, laptop = Client(), Client()
    for client in (office, laptop):
        assert attempt(client, SITE_LOGIN, OPERATOR, PASSWORD).status_code == 302
        assert client.get(OPERATOR_PAGE).status_code == 200

    operator_user.set_password("a brand new passphrase 2026")
    operator_user.save()

    for client in (office, laptop):
        response = client.get(OPERATOR_PAGE)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))
    assert attempt(Client(), SITE_LOGIN, OPERATOR, PASSWORD).status_code == 200  # the old one no longer works
    assert attempt(Client(), SITE_LOGIN, OPERATOR, "a brand new passphrase 2026").status_code == 302
