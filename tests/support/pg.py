"""A throwaway PostgreSQL server for the test suite.

Why: the claim path relies on PostgreSQL behaviour (``FOR UPDATE SKIP LOCKED``, real
concurrent transactions) that SQLite cannot stand in for, so the tests start a real
server of their own with ``initdb`` + ``pg_ctl`` in a temporary folder: no Docker, no
system service, nothing shared between runs. Durability is traded for speed
(``fsync=off`` and friends) because the data dies with the run anyway.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType

SUPERUSER = "postgres"
HOST = "127.0.0.1"
BIN_DIR_ENV = "SWITCHBOARD_PG_BINDIR"
DEBIAN_BIN_GLOB = "/usr/lib/postgresql/*/bin"
_DIR_PREFIX = "switchboard-pg-"
_OWNER_FILE = "owner.pid"
_DB_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_SERVER_BINARIES = ("initdb", "pg_ctl", "postgres", "psql")


class PostgresError(RuntimeError):
    """A PostgreSQL tool failed; the message carries its output and the server log tail."""


def _version_key(path: str) -> int:
    # /usr/lib/postgresql/15/bin/initdb -> 15, so the newest installed major version wins.
    match = re.search(r"/postgresql/(\d+)/", path)
    return int(match.group(1)) if match else 0


def find_pg_bin(name: str) -> str | None:
    """Locate a PostgreSQL program, or None.

    Debian keeps initdb/pg_ctl/postgres off PATH (under /usr/lib/postgresql/<major>/bin),
    so PATH alone isn't enough. ``SWITCHBOARD_PG_BINDIR`` pins a directory.
    """
    pinned = os.environ.get(BIN_DIR_ENV)
    if pinned:
        pinned_path = Path(pinned) / name
        return str(pinned_path) if os.access(pinned_path, os.X_OK) else None
    on_path = shutil.which(name)
    if on_path:
        return on_path
    for candidate in sorted(glob.glob(f"{DEBIAN_BIN_GLOB}/{name}"), key=_version_key, reverse=True):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def missing_binaries() -> list[str]:
    """Names of the programs the server needs that cannot be found (empty when all are there)."""
    return [name for name in _SERVER_BINARIES if find_pg_bin(name) is None]


def to_asyncpg_dsn(url: str) -> str:
    """Turn an SQLAlchemy ``postgresql+asyncpg://`` URL into a DSN asyncpg/libpq accept."""
    return re.sub(r"^postgresql\+\w+://", "postgresql://", url)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _service_user() -> pwd.struct_passwd | None:
    """The account to run PostgreSQL as, or None to run as ourselves.

    initdb/postgres refuse to run as root, so root hands the server to ``postgres``
    (created by Debian's package) or, failing that, ``nobody``.
    """
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise PostgresError("running as root but neither user 'postgres' nor 'nobody' exists")


def _privilege_drop(user: pwd.struct_passwd | None) -> list[str]:
    if user is None:
        return []
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", user.pw_name, "--"]
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--"]
    raise PostgresError("running as root needs runuser or setpriv to start PostgreSQL as another user")


def _conf_quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _ident(name: str) -> str:
    if not _DB_NAME.match(name):
        raise ValueError(f"database name must match {_DB_NAME.pattern}: {name!r}")
    return f'"{name}"'


class PostgresServer:
    """One PostgreSQL cluster in a temporary folder, listening on 127.0.0.1 only.

    ``start()`` initialises the cluster on first use and (re)starts it on the same data
    dir and port afterwards, so ``kill()`` + ``start()`` simulates a crash and recovery.
    ``stop()`` shuts down and deletes everything.
    """

    def __init__(
        self, base_dir: str | os.PathLike[str] | None = None, settings: Mapping[str, str] | None = None
    ) -> None:
        """``settings``: more ``postgresql.conf`` lines (name to raw value), written after the defaults
        (the bench uses it to load ``pg_stat_statements``)."""
        self._base_dir = Path(base_dir) if base_dir is not None else Path(tempfile.gettempdir())
        self._settings = dict(settings or {})
        self._root: Path | None = None
        self._port: int | None = None
        self._running = False
        self._user = _service_user()
        self._prefix = _privilege_drop(self._user)
        pg_ctl = find_pg_bin("pg_ctl")
        if pg_ctl is None:
            raise PostgresError(f"PostgreSQL binaries not found: {', '.join(missing_binaries())}")
        # Take initdb/psql from pg_ctl's own directory so the versions match.
        bin_dir = Path(os.path.realpath(pg_ctl)).parent
        self._bin: dict[str, str] = {}
        for name in _SERVER_BINARIES:
            sibling = bin_dir / name
            found = str(sibling) if os.access(sibling, os.X_OK) else find_pg_bin(name)
            if found is None:
                raise PostgresError(f"PostgreSQL program {name!r} not found")
            self._bin[name] = found
        self._env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C",
            "LC_ALL": "C",
            "TZ": "UTC",
            "PGCONNECT_TIMEOUT": "10",
        }

    # -- public API -----------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise PostgresError("server not started")
        return self._port

    @property
    def root(self) -> Path:
        """The temporary folder holding data/, the socket dir and server.log."""
        if self._root is None:
            raise PostgresError("server not started")
        return self._root

    @property
    def is_running(self) -> bool:
        return self._running

    @property
    def log_path(self) -> Path:
        return self.root / "server.log"

    def start(self) -> None:
        """Initialise the cluster if needed and start it; waits until it accepts connections."""
        if self._running:
            return
        first_start = self._root is None
        if first_start:
            self._init_cluster()
            atexit.register(self.stop)
        attempts = 3 if first_start else 1
        for attempt in range(attempts):
            try:
                self._pg_ctl("start", "-w", "-t", "60", "-l", str(self.log_path), "-o", f"-p {self.port}")
            except PostgresError:
                # Another process may have grabbed the free port between probe and bind.
                if attempt + 1 < attempts and "could not bind" in self._log_tail():
                    self._port = _free_port()
                    continue
                raise
            break
        self._running = True

    def stop(self) -> None:
        """Shut down cleanly (``-m fast``) and delete the folder; safe to call twice."""
        if self._root is None:
            return
        if self._running:
            try:
                self._pg_ctl("stop", "-m", "fast", "-w", "-t", "60")
            except PostgresError:
                self._pg_ctl("stop", "-m", "immediate", "-w", "-t", "60")
            self._running = False
        shutil.rmtree(self._root, ignore_errors=True)
        self._root = None
        self._port = None
        atexit.unregister(self.stop)

    def kill(self, *, flush_wal: bool = True) -> None:
        """Hard-stop the server (``-m immediate``: no checkpoint, crash recovery on next start).

        With ``synchronous_commit=off`` a commit is acknowledged before its WAL leaves
        PostgreSQL's memory, so an immediate stop could drop transactions the caller saw
        commit, which a production server (synchronous_commit=on) would keep. ``flush_wal``
        first forces the WAL out so fault tests see production durability; pass False to
        lose whatever was not yet written.
        """
        if not self._running:
            return
        if flush_wal:
            # A WAL segment switch writes out all WAL before it (a plain commit need not).
            with contextlib.suppress(PostgresError):
                self._psql("postgres", "SELECT pg_switch_wal()")
        self._pg_ctl("stop", "-m", "immediate", "-w", "-t", "60")
        self._running = False

    def url(self, name: str) -> str:
        """SQLAlchemy URL of database ``name`` on this server."""
        return f"postgresql+asyncpg://{SUPERUSER}@{HOST}:{self.port}/{name}"

    def create_database(self, name: str, template: str | None = None) -> str:
        """Create an empty database (or a copy of ``template``) and return its SQLAlchemy URL.

        ``template`` lets a suite migrate one database once and clone it per test.
        """
        sql = f"CREATE DATABASE {_ident(name)}"
        if template is not None:
            sql += f" TEMPLATE {_ident(template)}"
        self._psql("postgres", sql)
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop a database even while clients are still connected to it."""
        self._psql("postgres", f"DROP DATABASE IF EXISTS {_ident(name)} WITH (FORCE)")

    def __enter__(self) -> PostgresServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals ------------------------------------------------------------------

    def _init_cluster(self) -> None:
        self._reap_stale()
        root = Path(tempfile.mkdtemp(prefix=_DIR_PREFIX, dir=self._base_dir))
        self._root = root
        try:
            (root / _OWNER_FILE).write_text(str(os.getpid()))
            (root / "sock").mkdir()
            if self._user is not None:
                for path in (root, root / "sock"):
                    os.chown(path, self._user.pw_uid, self._user.pw_gid)
            self._run(
                self._bin["initdb"],
                "-D", str(root / "data"),
                "-U", SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--no-locale",
                "--no-sync",
            )  # fmt: skip
            settings = {
                "listen_addresses": _conf_quote(HOST),
                "unix_socket_directories": _conf_quote(str(root / "sock")),
                "fsync": "off",
                "synchronous_commit": "off",
                "full_page_writes": "off",
                "max_connections": "200",
                "timezone": "'UTC'",
                "log_timezone": "'UTC'",
                **self._settings,
            }
            conf = "".join(f"{key} = {value}\n" for key, value in settings.items())
            with (root / "data" / "postgresql.conf").open("a") as fh:
                fh.write("\n# switchboard test server\n" + conf)
            (root / "data" / "pg_hba.conf").write_text(
                "local all all trust\nhost all all 127.0.0.1/32 trust\n"
            )
            self._port = _free_port()
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            self._root = None
            raise

    def _reap_stale(self) -> None:
        """Stop and delete servers left behind by test runs that died without cleanup.

        Why: pg_ctl detaches the postmaster, so a SIGKILLed pytest would otherwise leak a
        running server (its port, memory and shared memory) per crashed run.
        """
        for root in self._base_dir.glob(f"{_DIR_PREFIX}*"):
            try:
                owner = int((root / _OWNER_FILE).read_text())
            except (OSError, ValueError):
                continue
            if _pid_alive(owner):
                continue
            if (root / "data" / "postmaster.pid").exists():
                with contextlib.suppress(PostgresError):
                    self._run(self._bin["pg_ctl"], "stop", "-D", str(root / "data"), "-m", "immediate", "-w")
            shutil.rmtree(root, ignore_errors=True)

    def _pg_ctl(self, *args: str) -> None:
        self._run(self._bin["pg_ctl"], args[0], "-D", str(self.root / "data"), *args[1:])

    def _psql(self, database: str, sql: str) -> None:
        # psql runs as the caller: it only needs TCP, which trust auth lets in.
        cmd = [self._bin["psql"], "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", HOST, "-p", str(self.port)]
        self._exec([*cmd, "-U", SUPERUSER, "-d", database, "-c", sql])

    def _run(self, *args: str) -> None:
        self._exec([*self._prefix, *args])

    def _exec(self, cmd: list[str]) -> None:
        try:
            proc = subprocess.run(
                cmd,
                cwd=self._root,
                env=self._env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise PostgresError(f"timed out: {' '.join(cmd)}\n{self._log_tail()}") from exc
        if proc.returncode != 0:
            raise PostgresError(
                f"exit {proc.returncode}: {' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
                f"--- server log tail ---\n{self._log_tail()}"
            )

    def _log_tail(self, lines: int = 30) -> str:
        if self._root is None:
            return ""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _database_name(test_name: str) -> str:
    # Readable in server logs, unique across tests and parametrisations.
    stem = re.sub(r"[^a-z0-9_]+", "_", test_name.lower()).strip("_")[:40]
    return f"t_{stem}_{uuid.uuid4().hex[:10]}"


@contextlib.contextmanager
def fresh_database(server: PostgresServer, test_name: str, template: str | None = None) -> Iterator[str]:
    """A new database for one test (empty, or a copy of ``template``): its URL; dropped afterwards if the
    server still runs (cleanup only, keeping disk use flat: the cluster is deleted at session end)."""
    name = _database_name(test_name)
    url = server.create_database(name, template=template)
    try:
        yield url
    finally:
        if server.is_running:
            with contextlib.suppress(PostgresError):
                server.drop_database(name)
