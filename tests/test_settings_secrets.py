"""Secrets from files, DEBUG only on loopback, and the database connections' options:
``config.settings`` imported in a fresh interpreter.

Every key, token and password the settings read may come from ``<NAME>_FILE`` (``config.env.env_str``),
the way container secrets are mounted; the file's content is stripped of its trailing newline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from audit.notes import Signer

ROOT = Path(__file__).resolve().parents[1]
ORIGIN = "example.org/rft-audit-log"

READ_BACK = """
import json
from config import settings as s
print(json.dumps({
    "DJANGO_SECRET_KEY": s.SECRET_KEY,
    "FIELD_ENCRYPTION_KEY": s.FIELD_ENCRYPTION_KEY,
    "AUDIT_LOG_SIGNING_KEY": s.AUDIT_LOG_SIGNING_KEY,
    "AUDIT_LOG_PREVIOUS_KEYS": s.AUDIT_LOG_PREVIOUS_KEYS,
    "RESEARCH_DISPATCHER_SECRET": s.RESEARCH_DISPATCHER_SECRET,
    "OPENAI_API_KEY": s.OPENAI_API_KEY,
    "AUDIT_TOKEN": s.AUDIT_TOKEN,
    "DATABASE_PASSWORD": s.DATABASES["default"]["PASSWORD"],
    "DATABASE_MIGRATION_PASSWORD": (s.DATABASE_MIGRATION or {}).get("PASSWORD"),
    "DEBUG": s.DEBUG,
    "ALLOWED_HOSTS": s.ALLOWED_HOSTS,
    "DATABASE_OPTIONS": {alias: db["OPTIONS"] for alias, db in s.DATABASES.items()},
}))
"""


def _settings(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Import the settings with only ``env`` configuring them (a database on another host, so
    nothing is generated locally: every secret must be given)."""
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DATABASE_", "RFT_", "DJANGO_", "FIELD_", "AUDIT_", "RESEARCH_", "ALLOWED_", "OPENAI_"))
    }
    environ["RFT_DATA_DIR"] = str(tmp_path / "data")
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-c", READ_BACK],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _file(tmp_path: Path, name: str, content: str) -> str:
    path = tmp_path / name
    path.write_text(content + "\n")  # as `echo` or an editor leaves it
    path.chmod(0o600)
    return str(path)


def test_every_secret_setting_is_read_from_its_file(tmp_path: Path) -> None:
    signer = Signer.generate(ORIGIN)
    previous = Signer.generate(ORIGIN).verifier.key_string
    field_keys = [Fernet.generate_key().decode(), Fernet.generate_key().decode()]
    secrets = {
        "DJANGO_SECRET_KEY": "s" * 50,
        "FIELD_ENCRYPTION_KEY": ",".join(field_keys),
        "AUDIT_LOG_SIGNING_KEY": signer.key_string,
        "AUDIT_LOG_PREVIOUS_KEYS": previous,
        "RESEARCH_DISPATCHER_SECRET": "d" * 40,
        "OPENAI_API_KEY": "sk-from-file",
        "AUDIT_TOKEN": "rft_audit",
        "DATABASE_URL": "postgres://rft_app:app-password@db.internal:5432/rft",
        "DATABASE_MIGRATION_URL": "postgres://rft_owner:owner-password@db.internal:5432/rft",
    }
    env = {f"{name}_FILE": _file(tmp_path, name.lower(), value) for name, value in secrets.items()}

    run = _settings(
        tmp_path, AUDIT_LOG_ORIGIN=ORIGIN, RESEARCH_DISPATCHER_URL="https://dispatcher.internal/hook", **env
    )

    assert run.returncode == 0, run.stderr
    read = json.loads(run.stdout)
    assert read["DJANGO_SECRET_KEY"] == "s" * 50
    assert read["FIELD_ENCRYPTION_KEY"] == field_keys
    assert read["AUDIT_LOG_SIGNING_KEY"] == signer.key_string
    assert read["AUDIT_LOG_PREVIOUS_KEYS"] == [previous]
    assert read["RESEARCH_DISPATCHER_SECRET"] == "d" * 40
    assert (read["OPENAI_API_KEY"], read["AUDIT_TOKEN"]) == ("sk-from-file", "rft_audit")
    assert read["DATABASE_PASSWORD"] == "app-password"
    assert read["DATABASE_MIGRATION_PASSWORD"] == "owner-password"


def _remote(tmp_path: Path) -> dict[str, str]:
    """The minimum for a database on another host, every secret given in the environment."""
    return {
        "DATABASE_URL": "postgres://rft_app@db.internal/rft",
        "DJANGO_SECRET_KEY": "s" * 50,
        "FIELD_ENCRYPTION_KEY": Fernet.generate_key().decode(),
        "AUDIT_LOG_ORIGIN": ORIGIN,
        "AUDIT_LOG_SIGNING_KEY": Signer.generate(ORIGIN).key_string,
    }


def test_a_secret_and_its_file_both_set_is_refused(tmp_path: Path) -> None:
    env = {**_remote(tmp_path), "DJANGO_SECRET_KEY_FILE": _file(tmp_path, "secret_key", "f" * 50)}

    run = _settings(tmp_path, **env)

    assert run.returncode != 0
    assert "ImproperlyConfigured: DJANGO_SECRET_KEY and DJANGO_SECRET_KEY_FILE are both set: set one" in run.stderr


def test_an_empty_secret_beside_its_file_defers_to_the_file(tmp_path: Path) -> None:
    env = {**_remote(tmp_path), "DJANGO_SECRET_KEY": "", "DJANGO_SECRET_KEY_FILE": _file(tmp_path, "key", "f" * 50)}

    run = _settings(tmp_path, **env)

    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["DJANGO_SECRET_KEY"] == "f" * 50


def test_an_unreadable_secret_file_is_named(tmp_path: Path) -> None:
    env = {**_remote(tmp_path), "FIELD_ENCRYPTION_KEY_FILE": str(tmp_path / "missing")}
    del env["FIELD_ENCRYPTION_KEY"]

    run = _settings(tmp_path, **env)

    assert run.returncode != 0
    assert f"FIELD_ENCRYPTION_KEY_FILE: cannot read '{tmp_path / 'missing'}'" in run.stderr


# --- DEBUG only on loopback ---------------------------------------------------------------------


@pytest.mark.parametrize("hosts", ["app.example.org", "127.0.0.1,*", "localhost,10.0.0.5", ".example.org"])
def test_debug_with_a_host_that_is_not_loopback_is_refused(tmp_path: Path, hosts: str) -> None:
    run = _settings(tmp_path, **_remote(tmp_path), DJANGO_DEBUG="1", ALLOWED_HOSTS=hosts)

    assert run.returncode != 0
    line = run.stderr.strip().splitlines()[-1]
    assert line.startswith("django.core.exceptions.ImproperlyConfigured: DJANGO_DEBUG is on but ALLOWED_HOSTS")
    reachable = [host for host in hosts.split(",") if host not in ("127.0.0.1", "localhost")]
    assert all(repr(host) in line for host in reachable), line


@pytest.mark.parametrize("hosts", [None, "127.0.0.1,localhost,::1,[::1],testserver", "LOCALHOST"])
def test_debug_on_loopback_hosts_starts(tmp_path: Path, hosts: str | None) -> None:
    env = {**_remote(tmp_path), "DJANGO_DEBUG": "1"}
    if hosts is not None:
        env["ALLOWED_HOSTS"] = hosts

    run = _settings(tmp_path, **env)

    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["DEBUG"] is True


def test_any_host_without_debug_starts(tmp_path: Path) -> None:
    run = _settings(tmp_path, **_remote(tmp_path), ALLOWED_HOSTS="app.example.org")

    assert run.returncode == 0, run.stderr
    read = json.loads(run.stdout)
    assert read["DEBUG"] is False and read["ALLOWED_HOSTS"] == ["app.example.org"]


@pytest.mark.parametrize(
    ("replica", "message"),
    [
        (
            "postgres://rft_app@replica.internal/other",
            "DATABASE_REPLICA_URL names database 'other', DATABASE_URL 'rft'",
        ),
        ("mysql://rft_app@replica.internal/rft", "DATABASE_REPLICA_URL must point at PostgreSQL"),
    ],
)
def test_a_replica_of_another_database_is_refused(tmp_path: Path, replica: str, message: str) -> None:
    run = _settings(tmp_path, **_remote(tmp_path), DATABASE_REPLICA_URL=replica)
    assert run.returncode != 0
    assert f"ImproperlyConfigured: {message}" in run.stderr


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (
            {"AUDIT_LOG_SIGNING_KEY": Signer.generate("other.example/log").key_string},
            "AUDIT_LOG_SIGNING_KEY is named 'other.example/log' but AUDIT_LOG_ORIGIN is 'example.org/rft-audit-log'",
        ),
        ({"AUDIT_LOG_SIGNING_KEY": "PRIVATE+KEY+nonsense"}, "ImproperlyConfigured: AUDIT_LOG_SIGNING_KEY: "),
        ({"AUDIT_LOG_PREVIOUS_KEYS": "not-a-key"}, "ImproperlyConfigured: AUDIT_LOG_PREVIOUS_KEYS entry 1: "),
    ],
    ids=["another-origin", "malformed", "previous-malformed"],
)
def test_a_bad_audit_key_stops_start_up_naming_the_variable(tmp_path: Path, keys: dict[str, str], message: str) -> None:
    # Checked by the audit app as Django starts (audit/keys.py), not by the settings module.
    env = {**_remote(tmp_path), **keys, "DJANGO_SETTINGS_MODULE": "config.settings"}
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "RFT_", "DJANGO_", "AUDIT_"))}
    environ.update(env, RFT_DATA_DIR=str(tmp_path / "data"))
    run = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert run.returncode != 0
    assert message in run.stderr, run.stderr[-2000:]


def test_statements_are_bound_server_side_and_prepared_on_every_connection_by_default(tmp_path: Path) -> None:
    run = _settings(tmp_path, **_remote(tmp_path), DATABASE_REPLICA_URL="postgres://rft_app@replica.internal/rft")

    assert run.returncode == 0, run.stderr
    options = json.loads(run.stdout)["DATABASE_OPTIONS"]
    assert set(options) == {"default", "replica"}
    for alias in options.values():
        assert alias["server_side_binding"] is True and alias["prepare_threshold"] == 5


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"DB_PREPARE_THRESHOLD": "off"}, {"server_side_binding": True, "prepare_threshold": None}),
        ({"DB_PREPARE_THRESHOLD": "0"}, {"server_side_binding": True, "prepare_threshold": 0}),
        ({"DB_SERVER_SIDE_BINDING": "false"}, {"server_side_binding": False, "prepare_threshold": 5}),
    ],
)
def test_preparing_and_binding_can_be_turned_off(
    tmp_path: Path, env: dict[str, str], expected: dict[str, object]
) -> None:
    run = _settings(tmp_path, **_remote(tmp_path), **env)

    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["DATABASE_OPTIONS"]["default"] == expected


def test_a_bad_prepare_threshold_stops_start_up_naming_the_variable(tmp_path: Path) -> None:
    run = _settings(tmp_path, **_remote(tmp_path), DB_PREPARE_THRESHOLD="often")

    assert run.returncode != 0
    assert "ImproperlyConfigured: DB_PREPARE_THRESHOLD must be an integer, got 'often'" in run.stderr
