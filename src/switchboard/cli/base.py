"""What every CLI command shares: the error and output types, argument types that refuse bad input
before anything touches the database, rendering, and opening the settings and services.

Imported to build the parser, so it imports nothing heavy at module level: the settings, the stores and
SQLAlchemy load when a command needs them (``switchboard --help`` stays quick; docs/cli.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from switchboard.core.names import EMAIL, QUEUE, SLUG
from switchboard.core.verbs import ALL_VERBS, unknown_verbs

if TYPE_CHECKING:
    from switchboard.services import Services
    from switchboard.settings import Settings
    from switchboard.store.accounts import Endpoint

EXIT_FAILED = 1


EXIT_USAGE = 2


EXIT_SERVE = 3  # serve could not start


REVEAL_NOTE = "This is shown once and cannot be shown again: store it now."


class CliError(Exception):
    """A failure reported to the operator as ``error: <message>``, with a stable code for ``--json``."""

    def __init__(
        self, message: str, code: str = "invalid", exit_code: int = EXIT_USAGE, *, prog: str | None = None
    ) -> None:
        super().__init__(message)
        self.message, self.code, self.exit_code, self.prog = message, code, exit_code, prog


@dataclass
class Output:
    data: dict[str, Any]
    text: str


Handler = Callable[["Services", argparse.Namespace], Awaitable[Output]]


def arg_slug(value: str) -> str:
    if not SLUG.match(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a slug (1-64 lower-case letters, digits or dashes)"
        )
    return value


def arg_email(value: str) -> str:
    if not EMAIL.match(value.strip()):
        raise argparse.ArgumentTypeError(f"{value!r} is not an email address")
    return value.strip().lower()


def arg_queue(value: str) -> str:
    if not QUEUE.match(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a queue name (lower-case letters, digits, '.', '_' or '-', up to 64)"
        )
    return value


def arg_event_kind(value: str) -> str:
    """Refused while parsing, by the same rule (and message) the web form's route gets."""
    from switchboard.manage.sources import check_event_kind  # only `route create --kind` loads the stores

    try:
        return check_event_kind(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _csv(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def arg_queues(value: str) -> list[str]:
    names = _csv(value)
    if not names:
        raise argparse.ArgumentTypeError("name at least one queue")
    return [arg_queue(name) for name in names]


def arg_verbs(value: str) -> list[str]:
    verbs = _csv(value)
    if not verbs:
        raise argparse.ArgumentTypeError("name at least one verb, or use --default-grant")
    bad = unknown_verbs(verbs)
    if bad:
        raise argparse.ArgumentTypeError(
            f"unknown verbs: {', '.join(bad)} (valid verbs: {', '.join(sorted(ALL_VERBS))})"
        )
    return verbs


def arg_limit(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if not 1 <= n <= 500:
        raise argparse.ArgumentTypeError(f"{value!r} is not a count from 1 to 500")
    return n


def arg_todo_id(value: str) -> str:
    from switchboard.core.ids import looks_like  # its module loads the ULID library

    if not looks_like("td", value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a todo id (td_...)")
    return value


def iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]], empty: str) -> str:
    if not rows:
        return empty
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = [headers, *rows]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def human_json(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "email": row.email,
        "operator": bool(row.is_operator),
        "created_at": iso(row.created_at),
    }


def endpoint_json(ep: Endpoint, email: str) -> dict[str, Any]:
    return {
        "id": ep.id,
        "slug": ep.slug,
        "human": email,
        "verbs": list(ep.verbs),
        "queues": list(ep.queues),
        "presence": ep.effective_presence,
        "presence_override": ep.presence_override,
        "created_at": iso(ep.created_at),
    }


def inbound_url(settings: Settings, path: str) -> str | None:
    return settings.public_url.rstrip("/") + path if settings.public_url else None


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def shares_key_warning(settings: Settings) -> str | None:
    """Instances on one PostgreSQL must open each other's sealed secrets; a per-machine key file cannot."""
    if settings.resolved_database_url().startswith("postgresql") and not settings.cred_key:
        return (
            f"SWITCHBOARD_CRED_KEY is not set: secrets are sealed with the key file in {settings.data_dir}, "
            "which is per machine; every instance sharing this database must use the same key"
        )
    return None


async def require_human(services: Services, email: str) -> Any:
    row = await services.accounts.human_by_email(email)
    if row is None:
        raise CliError(f"no human with email {email!r}", "not_found", EXIT_FAILED)
    return row


async def emails_by_id(services: Services) -> dict[str, str]:
    return {row.id: row.email for row in await services.accounts.list_humans()}


async def require_endpoint(services: Services, slug: str) -> Endpoint:
    endpoint = await services.accounts.endpoint_by_slug(slug)
    if endpoint is None:
        raise CliError(f"no endpoint with slug {slug!r}", "not_found", EXIT_FAILED)
    return endpoint


def load_settings(args: argparse.Namespace) -> Settings:
    """Settings from ``SWITCHBOARD_*``, with the command-line flags winning."""
    from switchboard.process import preflight

    overrides: dict[str, Any] = {}
    if args.data is not None:
        overrides["data_dir"] = args.data
    if getattr(args, "listen", None) is not None:
        overrides["listen"] = args.listen
    try:
        return preflight.load_settings(overrides)
    except preflight.ConfigError as exc:
        raise CliError(exc.message) from None


def open_services(settings: Settings) -> Services:
    from sqlalchemy.exc import ArgumentError

    from switchboard.services import build_services

    try:
        return build_services(settings)
    except ArgumentError:  # the URL may hold a password: never echo it
        raise CliError("SWITCHBOARD_DATABASE_URL is not a database URL this server can use") from None
