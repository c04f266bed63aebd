"""Start-up: the dev override refused without DEBUG, and the configured processors registered;
the pathway library page shows the configured model's processor and status."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from pathways.embeddings import _BUILDERS, OpenAIEmbedding, VoyageEmbedding
from processors.catalogue import EMBEDDING_PROCESSORS, KNOWN
from processors.checks import configured_processors, processors_registered
from processors.models import Processor
from tests.html import parse
from tests.processors.support import registered

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = "/dashboard/admin/reasoning/pathway-library"
Status = Processor.Status


def import_settings(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``config.settings`` in a fresh interpreter (a loopback database URL: nothing connects)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "RFT_", "DJANGO_", "PROCESSOR_"))}
    environ.update(
        RFT_DATA_DIR=str(tmp_path),
        DATABASE_URL="postgres://rft:rft@127.0.0.1:5432/rft",
        DJANGO_SECRET_KEY="s" * 50,
        FIELD_ENCRYPTION_KEY=Fernet.generate_key().decode(),
        **env,
    )
    code = "from config import settings as s; print(s.PROCESSOR_DEV_OVERRIDE)"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60, check=False
    )


def test_the_override_is_refused_without_debug_naming_the_variable(tmp_path: Path) -> None:
    result = import_settings(tmp_path, PROCESSOR_DEV_OVERRIDE="1")
    assert result.returncode != 0
    assert "ImproperlyConfigured: PROCESSOR_DEV_OVERRIDE is on but DJANGO_DEBUG is off" in result.stderr


def test_the_override_is_accepted_with_debug_and_off_by_default(tmp_path: Path) -> None:
    assert import_settings(tmp_path, PROCESSOR_DEV_OVERRIDE="1", DJANGO_DEBUG="1").stdout.strip() == "True"
    assert import_settings(tmp_path).stdout.strip() == "False"


def test_every_embedding_model_and_vendor_client_has_a_catalogue_processor() -> None:
    assert set(_BUILDERS) == set(EMBEDDING_PROCESSORS)
    assert {OpenAIEmbedding.processor, VoyageEmbedding.processor} <= {k for k, v in KNOWN.items() if v.leaves_host}


def test_a_model_without_a_processor_fails_naming_the_variable(settings: Any) -> None:
    settings.PATHWAY_EMBEDDING_MODEL = "acme_embed_v9"
    with pytest.raises(ImproperlyConfigured, match="PATHWAY_EMBEDDING_MODEL"):
        configured_processors()


@pytest.mark.django_db
def test_the_default_configuration_passes_without_a_query(settings: Any) -> None:
    settings.PATHWAY_EMBEDDING_MODEL = "hash_bucket_v1"
    settings.RESEARCH_DISPATCHER_URL = ""
    with CaptureQueriesContext(connection) as queries:
        assert processors_registered(databases=["default"]) == []
    assert len(queries) == 0


@pytest.mark.django_db
def test_an_unregistered_vendor_or_dispatcher_fails_the_check_naming_the_variable(settings: Any) -> None:
    settings.PATHWAY_EMBEDDING_MODEL = "voyage_3_5_lite"
    settings.RESEARCH_DISPATCHER_URL = "http://127.0.0.1:9/hook"

    errors = processors_registered(databases=["default"])
    assert [(e.id, e.msg.split()[0]) for e in errors] == [
        ("processors.E001", "PATHWAY_EMBEDDING_MODEL"),
        ("processors.E001", "RESEARCH_DISPATCHER_URL"),
    ]
    with pytest.raises(SystemCheckError, match="RESEARCH_DISPATCHER_URL is set, but its processor"):
        call_command("check", "--database", "default")

    # Registered in any status, the check passes: the gate decides per call.
    registered("voyage", Status.PENDING_COMPLIANCE)
    registered("research_dispatcher", Status.REVOKED)
    assert processors_registered(databases=["default"]) == []


@pytest.mark.django_db
def test_the_check_waits_for_the_database_checks(settings: Any) -> None:
    settings.PATHWAY_EMBEDDING_MODEL = "openai_text_3_small"
    assert processors_registered(databases=None) == []  # a plain `manage.py <command>`


def badge(client: Client) -> tuple[str, str]:
    page = parse(client.get(LIBRARY).content)
    status = page.by_id("embedding-processor-status")
    return status.attrs["data-status"], page.text_of("embedding-processor")


def test_the_library_shows_a_builtin_model_as_never_leaving_the_host(operator_client: Client, settings: Any) -> None:
    settings.PATHWAY_EMBEDDING_MODEL = "hash_bucket_v1"
    status, text = badge(operator_client)
    assert status == "built_in"
    assert "hash_bucket_v1" in text and "never leave this host" in text


@pytest.mark.parametrize(
    ("status", "shown", "words"),
    [
        (Status.ACTIVE, "active", "an agreement covers it"),
        (Status.PENDING_COMPLIANCE, "pending_compliance", "nothing is sent"),
        (None, "not_registered", "not registered"),
    ],
)
def test_the_library_shows_the_vendor_processor_status(
    operator_client: Client, settings: Any, status: str | None, shown: str, words: str
) -> None:
    settings.PATHWAY_EMBEDDING_MODEL = "voyage_3_5_lite"
    if status is not None:
        registered("voyage", status)
    got, text = badge(operator_client)
    assert got == shown
    assert words in text
