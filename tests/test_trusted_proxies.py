"""Client addresses: ``X-Forwarded-For`` counts only from ``TRUSTED_PROXIES`` (none by default).

Against the real web server (``config.gunicorn``), through the per-address login lockout
(``LOGIN_FAILURE_LIMIT`` failures from one address lock it for every username): a header the
client wrote can neither spread its failures over invented addresses nor lock out an address
it names; behind a trusted proxy, the hop that proxy saw is the client.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured

from audit.actions import Action
from audit.logins import address_digest
from audit.models import AuditEvent
from config.env import env_networks
from tests.factories import PASSWORD
from tests.servers import Gunicorn

pytestmark = pytest.mark.django_db(transaction=True)

LOGIN = "/accounts/login/"
LIMIT = 10
_CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def login(base: str, username: str, password: str, forwarded_for: str | None = None) -> httpx.Response:
    """One login through the form, as a browser sends it; ``forwarded_for`` as the client claims it."""
    headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else {}
    with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
        form = client.get(LOGIN)
        match = _CSRF.search(form.text)
        assert match, form.text[:300]
        return client.post(
            LOGIN,
            data={"username": username, "password": password, "csrfmiddlewaretoken": match[1]},
            headers={"Referer": f"{base}{LOGIN}"},
        )


def fail_from_many_addresses(base: str, times: int, claimed: str | None = None) -> None:
    """``times`` failures, each for another (unknown) username, each claiming another address
    unless ``claimed`` names one."""
    for n in range(times):
        forwarded = claimed or f"198.51.100.{n + 1}"
        response = login(base, f"nobody-{n}", "Wrong-Pass-{n}", forwarded)
        assert response.status_code == 200, (n, response.status_code)  # the form again


@pytest.fixture
def untrusting() -> Iterator[str]:
    with Gunicorn() as gunicorn:  # TRUSTED_PROXIES unset, as for make run
        yield gunicorn.url


@pytest.fixture
def behind_a_proxy() -> Iterator[str]:
    # The test client connects from 127.0.0.1: it plays the load balancer.
    with Gunicorn({"TRUSTED_PROXIES": "127.0.0.1"}) as gunicorn:
        yield gunicorn.url


def test_a_rotated_header_does_not_escape_the_address_lockout(untrusting: str, operator_user: User) -> None:
    fail_from_many_addresses(untrusting, LIMIT - 1)

    # The failures all came from the socket's peer, whatever the header said: the tenth locks it.
    assert login(untrusting, "nobody-last", "Wrong-Pass", "203.0.113.98").status_code == 429
    assert login(untrusting, operator_user.username, PASSWORD, "203.0.113.99").status_code == 429
    # The trail records the real peer for every failure, never an address the client chose.
    failures = AuditEvent.objects.filter(action=Action.LOGIN_FAILED).values_list("payload", flat=True)
    assert {event["client_address_hmac"] for event in failures} == {address_digest("127.0.0.1")}


def test_a_named_address_cannot_be_locked_out_by_another_client(untrusting: str, operator_user: User) -> None:
    fail_from_many_addresses(untrusting, LIMIT - 1, claimed="203.0.113.7")
    assert login(untrusting, "nobody-last", "Wrong-Pass", "203.0.113.7").status_code == 429

    # The lockout is the real peer's: the address the client named was never counted.
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"127.0.0.1"}


def test_behind_a_trusted_proxy_the_forwarded_client_is_the_address(behind_a_proxy: str, operator_user: User) -> None:
    fail_from_many_addresses(behind_a_proxy, LIMIT - 1, claimed="203.0.113.7")
    assert login(behind_a_proxy, "nobody-last", "Wrong-Pass", "203.0.113.7").status_code == 429

    # 203.0.113.7 is locked; another client behind the same proxy is not.
    assert login(behind_a_proxy, operator_user.username, PASSWORD, "203.0.113.7").status_code == 429
    assert login(behind_a_proxy, operator_user.username, PASSWORD, "198.51.100.200").status_code == 302
    # A client's own header before the proxy's hop is not believed: the proxy appends the peer it saw.
    assert login(behind_a_proxy, operator_user.username, PASSWORD, "203.0.113.7, 198.51.100.201").status_code == 302


@pytest.mark.parametrize(
    ("value", "networks"),
    [("", []), ("10.0.0.5, 10.1.0.0/16", ["10.0.0.5/32", "10.1.0.0/16"]), ("::1", ["::1/128"])],
)
def test_the_setting_reads_addresses_and_networks(
    monkeypatch: pytest.MonkeyPatch, value: str, networks: list[str]
) -> None:
    monkeypatch.setenv("TRUSTED_PROXIES", value)
    assert env_networks("TRUSTED_PROXIES") == networks


@pytest.mark.parametrize("value", ["*", "10.0.0.300", "proxy.internal"])
def test_a_bad_setting_fails_naming_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("TRUSTED_PROXIES", value)
    with pytest.raises(ImproperlyConfigured, match="TRUSTED_PROXIES"):
        env_networks("TRUSTED_PROXIES")
