"""One settings object, read from ``SWITCHBOARD_*`` variables (documented in docs/configuration.md)."""

from __future__ import annotations

import base64
import binascii
import os
import ssl
from pathlib import Path

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

MAX_AUTO_NOTIFY_PROCESSES = 4
DATABASE_URL_PREFIXES = (
    "postgresql://",
    "postgres://",
    "postgresql+asyncpg://",
    "sqlite://",
    "sqlite+aiosqlite://",
)
DATABASE_URL_FORMS = "postgresql://USER:PASSWORD@HOST:PORT/DB or sqlite:///PATH"


class Settings(BaseSettings):
    """Operator settings. Every field maps to ``SWITCHBOARD_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="SWITCHBOARD_", extra="ignore", populate_by_name=True)

    data_dir: Path = Field(default=Path("./data"), alias="SWITCHBOARD_DATA")
    database_url: str | None = None
    listen: str = "127.0.0.1:8080"
    public_url: str | None = None
    cred_key: str | None = None
    instance_id: str | None = None
    # Bring a behind schema to head when serve (or an admin command) starts; off: refuse and name
    # `switchboard db upgrade` (docs/self-hosting.md, "Upgrades").
    auto_upgrade: bool = True
    log_level: str = "INFO"  # DEBUG | INFO | WARNING | ERROR (docs/self-hosting.md, "Observability")
    log_format: str = "json"  # json | text

    lease_seconds: int = 300
    max_lease_seconds: int = 3600
    reaper_interval: float = 5.0
    retry_base_seconds: float = 30.0
    retry_cap_seconds: float = 3600.0
    max_attempts: int = 5
    doorbell_heartbeat_seconds: float = 60.0

    # Connections and per-tenant caps (docs/configuration.md, "Connections and limits").
    max_connections: int = Field(default=1000, ge=1)
    header_timeout_seconds: float = Field(default=10.0, gt=0)
    keep_alive_timeout_seconds: float = Field(default=5.0, gt=0)
    forwarded_allow_ips: str = ""  # a proxy's addresses; empty: X-Forwarded-* is never trusted
    endpoints_per_human: int = Field(default=50, ge=1)
    mcp_sessions_per_endpoint: int = Field(default=16, ge=1)
    mcp_streams_per_endpoint: int = Field(default=16, ge=1)
    mcp_max_sessions: int = Field(default=10_000, ge=1)

    mcp_rate_per_minute: int = 600
    max_body_bytes: int = 1024 * 1024

    push_allow_http: bool = False
    # PEM file of private CA(s) trusted for outbound HTTPS in addition to the system store.
    ca_bundle: Path | None = None
    notify_hook_allow_cidrs: str = ""
    notify_hook_ceiling: int = 5
    # The instance's bound (REQ-7), split between its notify worker processes. 0 would be unbounded.
    notify_queue_size: int = Field(default=10_000, ge=1)
    notify_workers: int = 32
    notify_rate_per_minute: int = 120
    notify_grace_hours: float = 24.0
    # Deliver from a child process (docs/notify-hooks.md, "Delivery process"). Unset: yes, unless the
    # database is in memory (two processes cannot share it).
    notify_process: bool | None = None
    # How many such children share the delivery, each owning the hooks of a fixed share of the endpoints.
    # Unset: one per CPU core, at most 4.
    notify_processes: int | None = Field(default=None, ge=1, le=64)
    # The delivery log (docs/notify-hooks.md, "Delivery log"): newest rows kept, and their longest age.
    delivery_log_max_rows: int = Field(default=10_000, ge=0)
    delivery_log_max_age_hours: float = Field(default=168.0, gt=0)

    # A2A task surface and push notifications (docs/a2a.md; docs/configuration.md, "A2A").
    a2a_rate_per_minute: int = 600
    a2a_streams_per_endpoint: int = Field(default=16, ge=1)  # open SSE streams (a2a/stream_cap.py)
    a2a_push_enabled: bool = True
    a2a_push_allow_cidrs: str = ""
    a2a_push_configs_per_task: int = 5
    a2a_push_workers: int = 8
    a2a_push_host_inflight: int = 4
    a2a_push_host_rate_per_minute: float = 120.0
    a2a_push_host_burst: int = 20
    a2a_push_max_attempts: int = 10
    a2a_push_retry_base_seconds: float = 30.0
    a2a_push_retry_cap_seconds: float = 3600.0
    a2a_push_poll_seconds: float = 2.0
    a2a_push_retention_hours: float = 24.0
    a2a_send_wait_seconds: float = Field(default=30.0, ge=0, le=300)  # SendMessage's wait (docs/a2a.md)
    a2a_push_slow_timeout_seconds: float = Field(default=30.0, ge=1, le=120)
    a2a_push_order_wait_seconds: float = Field(default=60.0, ge=0)

    # Web UI and MCP OAuth (docs/web.md; docs/configuration.md, "Web UI and OAuth").
    session_secret: str | None = None  # default: derived from the cred key (HKDF)
    session_hours: float = 12.0
    login_attempts_per_minute: int = 10
    oauth_enabled: bool = True
    oauth_access_token_seconds: int = 3600
    oauth_refresh_token_days: float = 30.0
    oauth_registrations_per_hour: int = 20
    # OAuth Client ID Metadata Documents (docs/web.md, "Client ID Metadata Documents"): a client_id that
    # is an https URL is fetched through the SSRF guard, with its own allowlist (default: none).
    oauth_client_metadata_documents: bool = True
    oauth_cimd_allow_cidrs: str = ""

    # Retention (docs/reliability.md, "Retention"): terminal todos (done, dead, canceled) and their
    # history are deleted this long after their last change; 0 keeps them for ever.
    retention_hours: float = Field(default=168.0, ge=0)
    retention_interval_seconds: float = Field(default=300.0, gt=0)  # between two sweeps
    # Todos per batch; unset: 100 (queue/retention.py, SQLITE_BATCH and PG_BATCH).
    retention_batch: int | None = Field(default=None, ge=1, le=5000)
    # Egress proxy for every outbound call (docs/self-hosting.md, "Static outbound IPs"):
    # http://[USER:PASSWORD@]IP:PORT, an HTTP CONNECT proxy named by IP address. Never logged.
    outbound_proxy: str | None = None
    # Operator events (docs/self-hosting.md, "Operator events"): a Standard Webhooks receiver of the
    # operator's, reached through the notify hooks' SSRF guard and allowlist; the secret is theirs.
    operator_webhook_url: str | None = None
    operator_webhook_secret: str | None = Field(default=None, validate_default=True)

    @field_validator("operator_webhook_url")
    @classmethod
    def _operator_url_form(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("https://", "http://")):
            raise ValueError("must be an https:// URL")  # the SSRF guard checks the rest at start
        return value or None

    @field_validator("operator_webhook_secret")
    @classmethod
    def _operator_secret_form(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            if info.data.get("operator_webhook_url"):
                raise ValueError(
                    "required with SWITCHBOARD_OPERATOR_WEBHOOK_URL (whsec_ + base64 of 32 bytes)"
                )
            return None
        key = value.removeprefix("whsec_")
        try:
            raw = base64.b64decode(key, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if not value.startswith("whsec_") or len(raw) != 32 or base64.b64encode(raw).decode() != key:
            raise ValueError("must be whsec_ + standard base64 of 32 random bytes")  # the value is not echoed
        return value

    @field_validator("database_url")
    @classmethod
    def _database_url_form(cls, value: str | None) -> str | None:
        if value and not value.startswith(DATABASE_URL_PREFIXES):
            raise ValueError(f"accepted forms: {DATABASE_URL_FORMS}")  # never echo it: it may hold a password
        return value

    @field_validator("ca_bundle")
    @classmethod
    def _ca_bundle_loads(cls, value: Path | None) -> Path | None:
        if value is not None:
            try:
                ssl.create_default_context().load_verify_locations(cafile=str(value))
            except (OSError, ssl.SSLError):
                raise ValueError(f"{value}: not a readable PEM file of CA certificates") from None
        return value

    @field_validator("outbound_proxy")
    @classmethod
    def _outbound_proxy_form(cls, value: str | None) -> str | None:
        if not value or not value.strip():
            return None
        from switchboard.push._proxy import parse_proxy_url  # only when set: preflight stays light

        parse_proxy_url(value)  # its ValueError never repeats the URL (it may hold a password)
        return value.strip()

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        if value.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ValueError("accepted: DEBUG, INFO, WARNING or ERROR")
        return value.upper()

    @field_validator("log_format")
    @classmethod
    def _log_format(cls, value: str) -> str:
        if value.lower() not in ("json", "text"):
            raise ValueError("accepted: json or text")
        return value.lower()

    @field_validator("listen")
    @classmethod
    def _listen_has_port(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError("listen must be HOST:PORT")
        return value

    @property
    def listen_host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def listen_port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    def resolved_database_url(self) -> str:
        """The configured database, else SQLite in the data folder."""
        if self.database_url:
            return normalize_database_url(self.database_url)
        return f"sqlite+aiosqlite:///{(self.data_dir / 'switchboard.db').resolve()}"

    def in_memory_database(self) -> bool:
        url = self.resolved_database_url()
        return url.startswith("sqlite") and ":memory:" in url

    def notify_in_worker_process(self) -> bool:
        """SWITCHBOARD_NOTIFY_PROCESS, with its default resolved."""
        if self.notify_process is None:
            return not self.in_memory_database()
        return self.notify_process

    def notify_worker_processes(self) -> int:
        """SWITCHBOARD_NOTIFY_PROCESSES, with its default resolved (used only with the worker process).
        Never more than SWITCHBOARD_NOTIFY_QUEUE_SIZE or SWITCHBOARD_NOTIFY_WORKERS: the instance's queue
        and its concurrent attempts are split between them."""
        bound = min(self.notify_queue_size, self.notify_workers)
        if self.notify_processes is not None:
            return min(self.notify_processes, bound)
        return max(1, min(os.cpu_count() or 1, MAX_AUTO_NOTIFY_PROCESSES, bound))

    def allow_cidrs(self) -> tuple[str, ...]:
        """The notify-hook allowlist (SWITCHBOARD_NOTIFY_HOOK_ALLOW_CIDRS)."""
        return tuple(part.strip() for part in self.notify_hook_allow_cidrs.split(",") if part.strip())


def normalize_database_url(url: str) -> str:
    """Accept the plain ``postgresql://`` and ``sqlite://`` forms operators paste, and pick async drivers."""
    for plain, driver in (
        ("postgresql://", "postgresql+asyncpg://"),
        ("postgres://", "postgresql+asyncpg://"),
        ("sqlite://", "sqlite+aiosqlite://"),
    ):
        if url.startswith(plain):
            return driver + url[len(plain) :]
    return url
