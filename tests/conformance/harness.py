"""The conformance harness: real ``switchboard serve`` processes, configured from outside only.

* A server is ``switchboard serve`` with its default process layout (the notify worker processes
  included) and default settings except those its module's scenarios need (``ServerSpec``).
* DNS: ``boot/sitecustomize.py`` on the children's ``PYTHONPATH`` answers every outbound lookup from a
  hosts file the test owns (``Hosts``), in the server and its worker processes alike.
* TLS: the children trust the session's trustme CA through ``SSL_CERT_FILE`` (what
  ``ssl.create_default_context()`` honours); receivers present certificates it issued.
* Set-up goes through the CLI (humans) and the web UI over HTTP (endpoints, sources, routes, the hook
  controls); the endpoint's verbs through the ``mcp`` SDK client. The only windows in are ``/metrics``
  and the server's JSON log (stdout and stderr of the server and its children, in one file).

``FLEET`` starts the servers of every selected module at collection time, in background threads, so
their start-up overlaps; a module's fixture waits for its own (see conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import trustme
from prometheus_client.parser import text_string_to_metric_families

from switchboard.core.verbs import DEFAULT_GRANT, NOTIFY_HOOKS
from tests.reliability.procs import ServerProcess, server_env, switchboard_command
from tests.support.mcp_client import Agent, agent
from tests.support.receivers import HTTPSReceiver, RecordedRequest, Respond
from tests.support.secrets import reveal
from tests.support.waits import wait_until as wait_until  # the conformance modules' poll
from tests.support.world import gitea_delivery, pr_payload

BOOT = Path(__file__).parent / "boot"
HOSTS_ENV = "SBCONF_HOSTS_FILE"
READY_TIMEOUT = 120.0  # a loaded 2-core box
BOOTING = threading.Semaphore(2)  # servers booting at once: argon2 hashing and imports are CPU-bound
PASSWORD = "correct horse battery"
HOOK_VERBS = (*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs)
RECEIVER_NAMES = ("127.0.0.1", "hooks.test", "dispatch.test")
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
TOKEN = re.compile(r'data-testid="token">([^<]+)<')
SECRET = re.compile(r'data-testid="secret">([^<]+)<')
INBOUND = re.compile(r'id="inbound-url">([^<]+)<')


# -- DNS ---------------------------------------------------------------------------------------------


class Hosts:
    """The answers the server's outbound resolver gives (boot/sitecustomize.py reads them per lookup)."""

    def __init__(self, path: Path, answers: Mapping[str, Sequence[str]] | None = None) -> None:
        self.path = path
        self.answers: dict[str, list[str]] = {k: list(v) for k, v in (answers or {}).items()}
        self._write()

    def set(self, name: str, *ips: str) -> None:
        self.answers[name] = list(ips)
        self._write()

    def _write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.answers))
        os.replace(tmp, self.path)  # a reader sees the old file or the new one, never half of one


# -- servers -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerSpec:
    """One server a module needs: its name, the settings it changes, and the humans the CLI creates."""

    name: str
    settings: Mapping[str, str | int | float] = field(default_factory=dict)
    humans: tuple[str, ...] = ("alice", "bob")
    hosts: Mapping[str, Sequence[str]] = field(default_factory=dict)


class Conf:
    """One running ``switchboard serve`` and what a test sees of it from outside."""

    def __init__(self, spec: ServerSpec, root: Path, ca_pem: Path, database_url: str | None = None) -> None:
        self.spec = spec
        self.data_dir = root / spec.name
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.hosts = Hosts(self.data_dir / "hosts.json", spec.hosts)
        self.database_url = database_url
        # A shared server vends every test's endpoints under a few signed-in humans (one password hash
        # each): far more than the per-human endpoint cap (50, a guard tests/reliability exercises).
        settings = {"endpoints_per_human": 1000, **dict(spec.settings)}
        self.env = server_env(
            database_url=database_url,
            **settings,
            SSL_CERT_FILE=str(ca_pem),
            PYTHONPATH=str(BOOT),
            SBCONF_HOSTS_FILE=str(self.hosts.path),
        )
        self.proc = ServerProcess(self.data_dir, self.env, name=spec.name)
        self._booting: threading.Thread | None = None
        self._boot_error: BaseException | None = None
        self._log_offset = 0
        self._lines: list[dict[str, Any]] = []
        self._cookies: dict[str, httpx.Cookies] = {}
        self.migrated = threading.Event()  # the first CLI call has brought the schema up to date
        self._cancelled = threading.Event()  # set by stop(): a boot not begun yet never begins

    # -- lifecycle

    def boot(self) -> None:
        """In a background thread: the humans through the CLI (which migrates), then ``serve``."""

        def run() -> None:
            try:
                with BOOTING:
                    if not self._cancelled.is_set():
                        self._boot()
            except BaseException as exc:
                self._boot_error = exc

        self._booting = threading.Thread(target=run, name=f"boot-{self.spec.name}", daemon=True)
        self._booting.start()

    def _boot(self) -> None:
        """The humans, then ``serve``, until it answers /healthz (so at most ``BOOTING`` boot at once)."""

        def create(who: str) -> None:
            self.cli("human", "create", f"{who}@example.com", "--password-stdin", stdin=PASSWORD + "\n")

        first, *rest = self.spec.humans or ("",)
        if first:
            create(first)  # migrates the database before anything else touches it
        self.migrated.set()
        self.proc.start()
        others = [threading.Thread(target=create, args=(who,)) for who in rest]
        for t in others:
            t.start()
        for t in others:
            t.join(timeout=180)
        self._healthy()

    def _healthy(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        with httpx.Client(base_url=self.base_url, timeout=2) as http:
            while time.monotonic() < deadline:
                if not self.proc.alive:
                    raise AssertionError(f"{self.spec.name} exited:\n{self.proc.log_tail()}")
                with contextlib.suppress(httpx.TransportError, ValueError):
                    # /healthz answers at once; the components' lifespans (and their startup lines)
                    # have run only when /readyz no longer says "starting".
                    ready = http.get("/readyz")
                    if "starting" not in ready.json().get("reasons", ()):
                        return
                time.sleep(0.05)
        raise AssertionError(f"{self.spec.name} not ready:\n{self.proc.log_tail()}")

    def wait_ready(self) -> None:
        assert self._booting is not None
        self._booting.join(timeout=600)
        if self._boot_error is not None:
            raise self._boot_error
        self._healthy()
        # Ready means the notify worker processes are up as well: they log once each.
        self.wait_lines_sync(
            lambda line: line.get("event") == "notify worker ready",
            self.expected_workers(),
            timeout=READY_TIMEOUT,
        )

    def expected_workers(self) -> int:
        if int(self.spec.settings.get("notify_hook_ceiling", 5)) == 0:
            return 0
        processes = int(self.spec.settings.get("notify_processes", min(os.cpu_count() or 1, 4)))
        # never more children than queue slots or concurrent attempts: the instance's are split between them
        queue = int(self.spec.settings.get("notify_queue_size", 10_000))
        return min(processes, queue, int(self.spec.settings.get("notify_workers", 32)))

    def restart(self, **settings: str | int | float) -> None:
        """Stop gracefully and start again on the same data with ``settings`` changed."""
        self.proc.stop()
        env = dict(self.env)
        for name, value in settings.items():
            env[f"SWITCHBOARD_{name.upper()}"] = str(value)
        self.env = env
        self.proc.env = env
        self.spec = ServerSpec(self.spec.name, {**self.spec.settings, **settings}, self.spec.humans)
        self.proc.start()
        self._booting = threading.Thread(target=lambda: None)
        self._booting.start()
        self.wait_ready()

    def stop(self) -> None:
        self._cancelled.set()
        if self._booting is not None:
            self._booting.join(timeout=180)
        self.proc.stop()

    def cli(self, *args: str, stdin: str | None = None) -> dict[str, Any]:
        """One admin command with ``--json`` on this server's data (docs/cli.md)."""
        done = subprocess.run(
            [*switchboard_command(), *args, "--json", "--data", str(self.data_dir)],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=180,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(
                f"switchboard {' '.join(args[:2])} exited {done.returncode}: {done.stderr[-2000:]}"
            )
        data: dict[str, Any] = json.loads(done.stdout)
        return data

    # -- addresses

    @property
    def port(self) -> int:
        return self.proc.port

    @property
    def base_url(self) -> str:
        return self.proc.base_url

    @property
    def mcp_url(self) -> str:
        return self.proc.mcp_url

    def http(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.base_url, timeout=15, **kwargs)

    # -- windows in: the JSON log and /metrics

    def log_lines(self) -> list[dict[str, Any]]:
        """Every JSON line the server and its children wrote so far (other lines are skipped)."""
        with self.proc.log_path.open("rb") as f:
            f.seek(self._log_offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1  # a line still being written is read next time
        self._log_offset += end
        for raw in chunk[:end].splitlines():
            if raw.startswith(b"{"):
                with contextlib.suppress(ValueError):
                    self._lines.append(json.loads(raw))
        return self._lines

    def raw_log(self) -> str:
        return self.proc.log_path.read_text(errors="replace")

    def lines(self, event: str, **match: Any) -> list[dict[str, Any]]:
        return [
            line
            for line in self.log_lines()
            if line.get("event") == event and all(line.get(k) == v for k, v in match.items())
        ]

    def wait_lines_sync(
        self, want: Callable[[dict[str, Any]], bool], count: int = 1, timeout: float = 60
    ) -> None:
        deadline = time.monotonic() + timeout
        while sum(1 for line in self.log_lines() if want(line)) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.spec.name}: log never showed the line:\n{self.proc.log_tail()}")
            time.sleep(0.05)

    async def wait_lines(
        self, event: str, count: int = 1, timeout: float = 30, **match: Any
    ) -> list[dict[str, Any]]:
        """Poll the log (bounded) until ``count`` lines of ``event`` with fields ``match`` are there."""
        deadline = time.monotonic() + timeout
        while len(found := self.lines(event, **match)) < count:
            assert time.monotonic() < deadline, (
                f"{len(found)} of {count} {event!r} lines {match} in {timeout} s"
            )
            await asyncio.sleep(0.05)
        return found

    async def metrics(self) -> Metrics:
        async with self.http() as http:
            r = await http.get("/metrics")
        assert r.status_code == 200
        return Metrics.parse(r.text)

    async def counted(self, before: Metrics, name: str, want: float, **labels: str) -> Metrics:
        """/metrics once ``name{labels}`` has grown by at least ``want`` since ``before``. The notify
        worker processes relay their counters to the server twice a second, so a counter can trail the
        health row or the log line that the test saw first; and on a server shared by a module an
        earlier test's relayed count can land after ``before`` was read, so exact per-hook facts are
        checked on the hook's own log lines and health, and the counter only for having counted."""

        async def reached() -> Metrics | None:
            now = await self.metrics()
            return now if delta(now, before, name, **labels) >= want else None

        found: Metrics = await wait_until(reached, timeout=10.0, what=f"{name}{labels} +{want}")
        return found

    # -- tenants

    @asynccontextmanager
    async def human(self, who: str = "alice") -> AsyncIterator[WebHuman]:
        """``who`` signed in (once per server: sign-ins are rate limited; the session cookie is kept)."""
        person = WebHuman(self, f"{who}@example.com")
        try:
            cookies = self._cookies.get(who)
            if cookies is None:
                await person.sign_in()
                self._cookies[who] = httpx.Cookies(person.http.cookies)
            else:
                person.http.cookies = httpx.Cookies(cookies)
            yield person
        finally:
            await person.close()


@dataclass
class Metrics:
    """One scrape of ``/metrics``: sample values by name and labels."""

    samples: dict[tuple[str, frozenset[tuple[str, str]]], float]
    text: str

    @classmethod
    def parse(cls, text: str) -> Metrics:
        samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples[(s.name, frozenset(s.labels.items()))] = s.value
        return cls(samples, text)

    def get(self, name: str, **labels: str) -> float:
        return self.samples.get((name, frozenset(labels.items())), 0.0)

    def labels_of(self, name: str, label: str) -> set[str]:
        return {dict(k)[label] for (n, k), _ in self.samples.items() if n == name and label in dict(k)}


def delta(after: Metrics, before: Metrics, name: str, **labels: str) -> float:
    return after.get(name, **labels) - before.get(name, **labels)


# -- the web UI, as a browser would use it ---------------------------------------------------------------


class WebHuman:
    """A signed-in human over plain HTTP: one cookie jar, every form posted with its page's CSRF token."""

    def __init__(self, conf: Conf, email: str) -> None:
        self.conf = conf
        self.email = email
        self.http = httpx.AsyncClient(base_url=conf.base_url, timeout=15, follow_redirects=False)

    async def close(self) -> None:
        await self.http.aclose()

    async def sign_in(self) -> None:
        page = await self.http.get("/login")
        r = await self.http.post(
            "/login", data={"csrf": csrf_of(page.text), "email": self.email, "password": PASSWORD}
        )
        assert r.status_code == 303, r.text

    async def post(
        self, path: str, data: Mapping[str, Any], *, csrf_from: str = "/endpoints"
    ) -> httpx.Response:
        page = await self.http.get(csrf_from)
        assert page.status_code == 200, (csrf_from, page.status_code)
        return await self.http.post(path, data={"csrf": csrf_of(page.text), **data})

    async def vend(self, slug: str, queues: Sequence[str], verbs: Sequence[str]) -> str:
        r = await self.post(
            "/vend", {"slug": slug, "queues": ",".join(queues), "verbs": list(verbs)}, csrf_from="/vend"
        )
        assert r.status_code == 200, r.text[-500:]
        token = found(TOKEN, r.text)
        reveal(token)
        return token

    async def source(self, slug: str, kind: str, trust: str) -> tuple[str, str | None]:
        """Register a source; returns its inbound path and, for signature trust, its secret."""
        r = await self.post(
            "/sources/new", {"slug": slug, "kind": kind, "trust": trust}, csrf_from="/sources"
        )
        assert r.status_code == 200, r.text[-500:]
        url = found(INBOUND, r.text)
        secret = found(SECRET, r.text) if trust != "token" else None
        path = "/" + url.split("/", 3)[3]
        reveal(path.rsplit("/", 1)[-1] if trust == "token" else None, secret)
        return path, secret

    async def route(self, source: str, queue: str, endpoint: str) -> None:
        r = await self.post(
            "/routes/new",
            {"source": source, "kind": "", "queue": queue, "endpoint": endpoint},
            csrf_from="/sources",
        )
        assert r.status_code == 303, r.text[-500:]

    async def hook_action(self, endpoint: str, hook_id: str, action: str) -> httpx.Response:
        return await self.post(
            f"/endpoints/{endpoint}/hooks/{hook_id}/{action}", {}, csrf_from=f"/endpoints/{endpoint}"
        )


def csrf_of(html: str) -> str:
    return found(CSRF, html)


def found(pattern: re.Pattern[str], text: str) -> str:
    match = pattern.search(text)
    assert match, f"{pattern.pattern!r} not on the page"
    return match.group(1)


# -- a tenant: endpoint, sources, routes, MCP client ---------------------------------------------------


@dataclass
class Tenant:
    conf: Conf
    human: WebHuman
    slug: str
    token: str
    agent: Agent
    inbound: dict[str, str]  # queue -> token-trust generic source path (verified deliveries)
    gitea_path: str | None = None  # a trust-"none" Gitea source on the first queue: signed or forged
    gitea_secret: str | None = None

    async def ok(self, verb: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.agent.ok(verb, args)

    async def hook(self, url: str, **args: Any) -> dict[str, Any]:
        return await self.ok("create_notify_hook", {"url": url, **args})

    async def health(self, hook_id: str) -> dict[str, Any]:
        hooks = (await self.ok("list_notify_hooks"))["hooks"]
        return next(h for h in hooks if h["hook_id"] == hook_id)

    async def todo(self, title: str = "a todo", queue: str | None = None, **extra: Any) -> str:
        """A verified delivery through the token-trust source of ``queue``; returns the todo id."""
        path = self.inbound[queue or next(iter(self.inbound))]
        async with self.conf.http() as http:
            r = await http.post(path, json={"title": title, **extra})
        assert r.status_code == 202, r.text
        (todo_id,) = r.json()["todos"]
        return str(todo_id)

    async def todos(self, count: int, title: str = "burst") -> list[str]:
        path = self.inbound[next(iter(self.inbound))]
        async with self.conf.http() as http:

            async def one(i: int) -> str:
                r = await http.post(path, json={"title": f"{title} {i}"})
                assert r.status_code == 202, r.text
                return str(r.json()["todos"][0])

            ids: list[str] = []
            for start in range(0, count, 16):
                ids += await asyncio.gather(*(one(i) for i in range(start, min(count, start + 16))))
            return ids

    async def gitea(
        self, *, signed: bool = True, title: str = "Add the thing", **payload: Any
    ) -> httpx.Response:
        """A Gitea delivery on the trust-"none" source, signed with its secret or forged."""
        assert self.gitea_path is not None and self.gitea_secret is not None
        body, headers = gitea_delivery(
            self.gitea_secret if signed else "forged-secret", {**pr_payload(title=title), **payload}
        )
        async with self.conf.http() as http:
            r = await http.post(self.gitea_path, content=body, headers=headers)
        assert r.status_code == 202, r.text
        return r


_counter = 0


def unique(prefix: str) -> str:
    global _counter
    _counter += 1
    return f"{prefix}-{os.getpid() % 1000}-{_counter}"


@asynccontextmanager
async def tenant(
    conf: Conf,
    *,
    who: str = "alice",
    slug: str | None = None,
    queues: Sequence[str] = ("inbox",),
    verbs: Sequence[str] = HOOK_VERBS,
    gitea: bool = False,
) -> AsyncIterator[Tenant]:
    """A fresh endpoint of ``who`` with a token-trust source routed per queue and an MCP client."""
    slug = slug or unique("ep")
    async with conf.human(who) as person:
        token = await person.vend(slug, queues, verbs)
        inbound: dict[str, str] = {}
        for queue in queues:
            src = f"{slug}-{queue}"[:60].rstrip("-")
            inbound[queue], _ = await person.source(src, "generic", "token")
            await person.route(src, queue, slug)
        gitea_path = gitea_secret = None
        if gitea:
            src = f"{slug}-gitea"
            gitea_path, gitea_secret = await person.source(src, "gitea", "none")
            await person.route(src, queues[0], slug)
        async with agent(conf.mcp_url, token) as a:
            yield Tenant(conf, person, slug, token, a, inbound, gitea_path, gitea_secret)


@asynccontextmanager
async def receiver(
    behaviour: Any = None, *, names: Iterable[str] = RECEIVER_NAMES
) -> AsyncIterator[HTTPSReceiver]:
    """An HTTPS receiver on 127.0.0.1 whose certificate (from the session CA) names ``names``."""
    async with HTTPSReceiver(
        ca=FLEET.ca, cert_hostnames=tuple(names), behaviour=behaviour or Respond(204)
    ) as rcv:
        yield rcv


def ip_url(rcv: HTTPSReceiver, path: str = "/hook") -> str:
    return f"https://127.0.0.1:{rcv.port}{path}"


async def next_body(rcv: HTTPSReceiver, timeout: float = 15.0) -> tuple[RecordedRequest, dict[str, Any]]:
    request = await rcv.next_request(timeout=timeout)
    return request, json.loads(request.body)


async def body_for(rcv: HTTPSReceiver, todo_id: str, timeout: float = 15.0) -> dict[str, Any]:
    """The notification about ``todo_id`` among everything ``rcv`` received (arrival order varies)."""

    def find() -> dict[str, Any] | None:
        for request in rcv.requests:
            sent = json.loads(request.body)
            if sent.get("todo_id") == todo_id:
                return dict(sent)
        return None

    found: dict[str, Any] = await wait_until(find, timeout=timeout, what=f"a notification for {todo_id}")
    return found


MARKER = "SIGNER-FAIL-MARKER"  # bodies carrying it fail in the signer (boot/sitecustomize.py, REQ-12)

NOTIFY = ServerSpec(
    "notify",
    {
        "notify_hook_allow_cidrs": "127.0.0.1/32",
        "reaper_interval": 0.2,  # a lease expiry is requeued within 0.2 s, not 5 s
        "retry_base_seconds": 0.3,  # a failed todo is due again after 0.3 s, not 30 s
        "SBCONF_SIGNER_FAILS": MARKER,
    },
    hosts={"hooks.test": ["127.0.0.1"], "dispatch.test": ["127.0.0.1"]},
)
"""The server the SPEC-0024 modules share (each test uses its own endpoints and receivers)."""


# -- the fleet -----------------------------------------------------------------------------------------


class Fleet:
    """Every server of the session, started once (in parallel) and stopped at the end."""

    def __init__(self) -> None:
        self._root: Path | None = None
        self._ca: trustme.CA | None = None
        self.servers: dict[str, Conf] = {}
        self._lock = threading.Lock()
        self._stopping: list[threading.Thread] = []
        self.users: dict[str, int] = {}  # selected modules per server: it stops after the last one

    @property
    def root(self) -> Path:
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="sb-conformance-"))
        return self._root

    @property
    def ca(self) -> trustme.CA:
        if self._ca is None:
            self._ca = trustme.CA()
        return self._ca

    @property
    def ca_pem(self) -> Path:
        pem = self.root / "ca.pem"
        if not pem.exists():
            self.ca.cert_pem.write_to_path(str(pem))
        return pem

    def prestart(self, spec: ServerSpec, database_url: str | None = None) -> Conf:
        with self._lock:
            conf = self.servers.get(spec.name)
            if conf is None:
                conf = self.servers[spec.name] = Conf(spec, self.root, self.ca_pem, database_url)
                conf.boot()
            return conf

    def get(self, spec: ServerSpec, database_url: str | None = None) -> Conf:
        conf = self.prestart(spec, database_url)
        conf.wait_ready()
        return conf

    def done(self, spec: ServerSpec, check: Callable[[Conf], None]) -> None:
        """A module is done with ``spec``: after the last one, ``check`` its log and stop it."""
        with self._lock:
            self.users[spec.name] = self.users.get(spec.name, 1) - 1
            last = self.users[spec.name] <= 0
        if last and spec.name in self.servers:
            check(self.servers[spec.name])
            self.release(spec)

    def release(self, spec: ServerSpec) -> None:
        """Stop a module's server in the background (a graceful stop takes seconds; nothing waits on it)."""
        conf = self.servers.pop(spec.name, None)
        if conf is not None:
            stopping = threading.Thread(target=conf.stop, name=f"stop-{spec.name}", daemon=True)
            stopping.start()
            self._stopping.append(stopping)

    def stop_all(self) -> None:
        for stopping in self._stopping:
            stopping.join(timeout=30)
        for name in list(self.servers):
            with contextlib.suppress(Exception):
                self.servers.pop(name).stop()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)


FLEET = Fleet()
