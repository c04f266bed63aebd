"""Where a lagging audit chain shows: GET /healthz, and a banner on operator pages only."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from audit.chain import chain_all
from config.env import env_float
from tests.conftest import DatabaseClock

pytestmark = pytest.mark.django_db

BANNER = "the audit chainer is not running or is behind"
OPERATOR_PAGE = "/dashboard/admin/reasoning/pathway-library"
PATIENT_PAGE = "/dashboard/profile"
# /healthz's close-work fields when no work is owed after closes (tests/reasoning/recording/test_close_work.py).
NOTHING_OWED = {"close_work_oldest_s": None, "close_work_failed": 0}


@pytest.fixture
def clock(db_clock: DatabaseClock) -> DatabaseClock:
    return db_clock


# The shared personas, made under the frozen clock: creating each writes an audit event,
# left unchained.
@pytest.fixture
def operator_client(clock: Any, operator_client: Client) -> Client:
    """The operator: sees the chain-lag banner on operator pages."""
    return operator_client


@pytest.fixture
def patient_client(clock: Any, patient_client: Client) -> Client:
    """A logged-in patient: may see only their own pages, never the operator banner."""
    return patient_client


# --- /healthz ---------------------------------------------------------------------------


def test_healthz_is_ok_without_authentication_when_the_chain_is_current(clock: Any) -> None:
    response = Client().get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "audit_chain_lag_s": 0.0, **NOTHING_OWED}


def test_healthz_reports_the_lag_while_under_the_threshold(operator_client: Client, clock: Any) -> None:
    clock.shift(timedelta(seconds=30))

    response = Client().get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "audit_chain_lag_s": 30.0, **NOTHING_OWED}


def test_healthz_is_degraded_503_when_the_chain_lags(operator_client: Client, clock: Any) -> None:
    clock.shift(timedelta(seconds=61))

    response = Client().get("/healthz")

    assert response.status_code == 503
    assert response.json() == {"status": "degraded", "audit_chain_lag_s": 61.0, **NOTHING_OWED}


def test_healthz_is_ok_again_once_the_chainer_catches_up(operator_client: Client, clock: Any) -> None:
    clock.shift(timedelta(seconds=61))
    chain_all()

    assert Client().get("/healthz").json() == {"status": "ok", "audit_chain_lag_s": 0.0, **NOTHING_OWED}


# --- the operator banner ----------------------------------------------------------------


def test_operator_page_shows_a_banner_when_the_chain_lags(operator_client: Client, clock: Any) -> None:
    clock.shift(timedelta(seconds=90))

    response = operator_client.get(OPERATOR_PAGE)

    assert response.status_code == 200
    assert BANNER in response.content.decode()
    assert "The audit chain is 90 s behind (limit 60 s)" in response.content.decode()


def test_operator_page_has_no_banner_while_the_chain_is_current(operator_client: Client, clock: Any) -> None:
    clock.shift(timedelta(seconds=30))

    response = operator_client.get(OPERATOR_PAGE)

    assert response.status_code == 200
    assert BANNER not in response.content.decode()


def test_patient_page_never_shows_the_banner(patient_client: Client, clock: Any) -> None:
    clock.shift(timedelta(seconds=90))

    response = patient_client.get(PATIENT_PAGE)

    assert response.status_code == 200
    assert BANNER not in response.content.decode()


# --- AUDIT_CHAIN_MAX_LAG_S ----------------------------------------------------------------


@pytest.mark.parametrize(("raw", "expected"), [("60", 60.0), ("2.5", 2.5), (" 90 ", 90.0)])
def test_lag_threshold_accepts_a_number_of_seconds(monkeypatch: pytest.MonkeyPatch, raw: str, expected: float) -> None:
    monkeypatch.setenv("AUDIT_CHAIN_MAX_LAG_S", raw)

    assert env_float("AUDIT_CHAIN_MAX_LAG_S", 60.0, minimum=1.0) == expected


@pytest.mark.parametrize("raw", ["soon", "nan", "inf", "0", "-5"])
def test_lag_threshold_refuses_a_bad_value_naming_the_variable(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("AUDIT_CHAIN_MAX_LAG_S", raw)

    with pytest.raises(ImproperlyConfigured, match="AUDIT_CHAIN_MAX_LAG_S must be"):
        env_float("AUDIT_CHAIN_MAX_LAG_S", 60.0, minimum=1.0)
