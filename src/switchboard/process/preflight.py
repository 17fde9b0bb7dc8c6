"""The checks a misconfigured ``switchboard serve`` fails on at once, with one line naming the setting
and the forms it accepts (docs/self-hosting.md, "First start").

This module imports nothing heavier than the settings, so ``serve`` can refuse before it loads the
database and web stacks: on a busy 2-core machine those imports alone take longer than the 2 s an
operator should wait to learn that the port is taken.
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from switchboard.settings import Settings

EXIT_INVALID = 2  # a setting has a value it cannot have
EXIT_CANNOT_START = 3  # the settings are well-formed but the server cannot start with them


class ConfigError(Exception):
    def __init__(self, message: str, exit_code: int = EXIT_CANNOT_START) -> None:
        super().__init__(message)
        self.message, self.exit_code = message, exit_code


def load_settings(overrides: dict[str, Any]) -> Settings:
    """Settings from ``SWITCHBOARD_*`` with ``overrides`` (the command-line flags) winning."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(f"{setting_name(e['loc'])}: {_problem(e['msg'])}" for e in exc.errors())
        raise ConfigError(f"invalid configuration: {problems}", EXIT_INVALID) from None


def setting_name(loc: Sequence[Any]) -> str:
    """The environment variable an operator sets, as docs/configuration.md names it."""
    name = str(loc[0]) if loc else "settings"
    return name if name.startswith("SWITCHBOARD_") else f"SWITCHBOARD_{name.upper()}"


def _problem(msg: str) -> str:
    return msg.removeprefix("Value error, ")  # pydantic's prefix; the input is never echoed


def check_data_dir(settings: Settings) -> None:
    """The data folder must be usable by this user before anything is created in it."""
    path = settings.data_dir
    probe = path if path.exists() else next((p for p in path.resolve().parents if p.exists()), None)
    if probe is None:
        return
    if not probe.is_dir():
        raise ConfigError(f"SWITCHBOARD_DATA {path}: not a folder (accepted: a folder this user can write)")
    if not os.access(probe, os.R_OK | os.W_OK | os.X_OK):
        where = "" if probe == path else f" (its parent {probe} cannot be written)"
        raise ConfigError(
            f"SWITCHBOARD_DATA {path}: not readable and writable by uid {os.getuid()}{where}; "
            "accepted: a folder this user owns (or --data DIR)"
        )


def check_listen(settings: Settings) -> None:
    """Bind the listen address once, so a taken port fails now, not after startup work."""
    host, port = settings.listen_host, settings.listen_port
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        raise ConfigError(
            f"SWITCHBOARD_LISTEN {settings.listen}: the host must be an IP address "
            "(accepted: HOST:PORT, e.g. 127.0.0.1:8080 or [::]:8080)",
            EXIT_INVALID,
        ) from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind(address)
        except OSError as exc:
            reason = "address already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
            raise ConfigError(
                f"SWITCHBOARD_LISTEN {settings.listen}: {reason} "
                "(accepted: a free HOST:PORT, via SWITCHBOARD_LISTEN or --listen)"
            ) from None


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite+aiosqlite:///PATH`` URL; None for PostgreSQL or an in-memory database."""
    prefix = "sqlite+aiosqlite:///"
    if not url.startswith(prefix) or ":memory:" in url:
        return None
    return Path(url[len(prefix) :])


def first_start(settings: Settings) -> bool:
    """A SQLite database that does not exist yet: nothing to check, the server creates it."""
    path = sqlite_path(settings.resolved_database_url())
    return path is not None and not path.exists()


def check(settings: Settings) -> None:
    check_data_dir(settings)
    check_listen(settings)


def quick_serve_check(argv: Sequence[str]) -> int | None:
    """For ``serve``: an exit code after printing the one-line reason, or None to go on. Arguments it
    does not understand are left to the full CLI parser (and its error messages)."""
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    parser.add_argument("--data", type=Path)
    parser.add_argument("--listen")
    try:
        args, rest = parser.parse_known_args(argv)
    except argparse.ArgumentError:
        return None
    if rest:
        return None
    overrides: dict[str, Any] = {}
    if args.data is not None:
        overrides["data_dir"] = args.data
    if args.listen is not None:
        overrides["listen"] = args.listen
    try:
        check(load_settings(overrides))
    except ConfigError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    return None


def local_url(settings: Settings) -> str:
    """The server's own base URL as seen from this machine (a wildcard listen address means loopback)."""
    wildcard = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}  # noqa: S104 - read, not bound
    host = wildcard.get(settings.listen_host, settings.listen_host)
    return (
        f"http://[{host}]:{settings.listen_port}" if ":" in host else f"http://{host}:{settings.listen_port}"
    )


def wait_ready(url: str, timeout: float, *, interval: float = 0.25) -> tuple[bool, str]:
    """Poll ``<url>/readyz`` until it answers 200 or ``timeout`` passes: (ready, the last answer).
    The polling is the point: the server is another process, with nothing to await."""
    import json
    import time
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while True:
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/readyz", timeout=2) as answer:  # noqa: S310 - http(s) only
                return True, answer.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            try:
                reasons = json.loads(exc.read()).get("reasons", [])
            except ValueError:
                reasons = []
            last = f"{exc.code}: {'; '.join(reasons) or exc.reason}"
        except (OSError, ValueError) as exc:
            last = f"no answer ({type(exc).__name__})"
        if time.monotonic() >= deadline:
            return False, last
        time.sleep(interval)
