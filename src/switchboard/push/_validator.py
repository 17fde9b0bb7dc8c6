"""The SSRF guard: ``Validator`` and the ``ValidatedTarget`` it hands the transport.

Order (docs/push.md): length and characters, scheme, userinfo, host and port, then
one resolution whose every address must pass ``AddressPolicy``. The transport dials
only ``ValidatedTarget.ips``; nothing resolves the name a second time.
"""

from __future__ import annotations

import asyncio
import functools
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address, ip_address

import anyio.to_thread

from switchboard.obs.logs import get_logger

from ._addresses import AddressPolicy, IPNetwork, parse_allowlist, strip_zone
from ._errors import AttemptTimeout, NetworkFailure, TargetRejected
from ._urls import ParsedURL, format_authority, format_origin, parse_url

log = get_logger("switchboard.push")

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""An async ``(host, port) -> [ip, ...]`` lookup. Tests inject one; production uses
:func:`system_resolver`."""

DEFAULT_RESOLVE_TIMEOUT = 2.0

_installed_resolver: Resolver | None = None


def install_resolver(resolver: Resolver | None) -> None:
    """Make ``resolver`` the lookup of every :class:`Validator` built afterwards in this process
    without a resolver of its own (``None`` restores :func:`system_resolver`).

    A code-level seam for harnesses that run the real server and its worker processes and must
    answer DNS themselves (tests/conformance installs one from a ``sitecustomize``). No setting or
    environment variable reaches it: only code already running in the process can call it.
    """
    global _installed_resolver
    _installed_resolver = resolver


async def system_resolver(host: str, port: int) -> list[str]:
    """Resolve A and AAAA with the system resolver, in a worker thread.

    ``getaddrinfo`` blocks and cannot be interrupted; the thread is abandoned when the
    caller's timeout cancels the wait, so the event loop is never held up.
    """
    infos = await anyio.to_thread.run_sync(
        functools.partial(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP),
        abandon_on_cancel=True,
    )
    return [str(info[4][0]) for info in infos]


@dataclass(frozen=True)
class ValidatedTarget:
    """A URL that passed the guard, with the addresses that passed with it.

    ``host`` is IDNA ASCII, lower-case, without a trailing dot (an IPv6 literal has no
    brackets). ``path`` is the request target including the query: it is sent, but
    must never be logged; use :attr:`redacted`. ``ips`` are the only addresses the
    transport may dial, in resolver order.
    """

    scheme: str
    host: str
    port: int
    path: str
    ips: tuple[str, ...]

    @property
    def authority(self) -> str:
        """``host[:port]`` as sent in the Host header."""
        return format_authority(self.scheme, self.host, self.port)

    @property
    def redacted(self) -> str:
        """``scheme://host[:port]/path`` with any query replaced by ``?[redacted]``."""
        path, sep, _ = self.path.partition("?")
        return format_origin(self.scheme, self.host, self.port) + path + ("?[redacted]" if sep else "")

    def __repr__(self) -> str:  # keep the query out of reprs that end up in logs
        return f"ValidatedTarget({self.redacted!r}, ips={self.ips!r})"


class _LookupFailed(Exception):
    def __init__(self, *, timed_out: bool) -> None:
        super().__init__("lookup timed out" if timed_out else "lookup failed")
        self.timed_out = timed_out


def _parse_answer(answer: object) -> tuple[IPv4Address | IPv6Address, str]:
    """One resolver answer as (address to judge, string to dial). Raises ValueError."""
    if not isinstance(answer, str):
        raise ValueError("resolver answers must be IP strings")
    addr = ip_address(answer)  # strict: "127.1" or a name is not an answer
    if isinstance(addr, IPv6Address):
        mapped = addr.ipv4_mapped
        if mapped is not None:
            return mapped, str(mapped)  # dial the IPv4 address itself
    return addr, str(addr)


class Validator:
    """Validate hook URLs against REQ-3, at create time and before every attempt.

    ``allow_cidrs`` is the operator allowlist (SWITCHBOARD_NOTIFY_HOOK_ALLOW_CIDRS),
    ``listen_addresses`` Switchboard's own ``(host, port)`` pairs, ``resolver`` an
    async ``(host, port) -> [ip]`` callable (default: the system resolver), and
    ``timeout`` bounds each lookup, whichever resolver does it.
    """

    def __init__(
        self,
        *,
        allow_http: bool = False,
        allow_cidrs: Iterable[str | IPNetwork] = (),
        listen_addresses: Sequence[tuple[str, int]] = (),
        resolver: Resolver | None = None,
        timeout: float = DEFAULT_RESOLVE_TIMEOUT,
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self._allow_http = allow_http
        self._policy = AddressPolicy(parse_allowlist(allow_cidrs), listen_addresses)
        if resolver is None:
            resolver = _installed_resolver if _installed_resolver is not None else system_resolver
        self._resolver: Resolver = resolver
        self._timeout = timeout

    def origin(self, url: str) -> tuple[str, str, int]:
        """The ``(scheme, host, port)`` that :meth:`check_attempt` would validate for
        ``url``, parsed exactly as it parses them, with no lookup. Raises
        :class:`TargetRejected` for a URL whose shape it would refuse."""
        parsed = parse_url(url, allow_http=self._allow_http)
        return parsed.scheme, parsed.host, parsed.port

    async def check(self, url: str) -> ValidatedTarget:
        """Validate at create time: any failure, a failed lookup included, is a
        :class:`TargetRejected` (``unresolvable`` for the lookup)."""
        parsed = parse_url(url, allow_http=self._allow_http)
        try:
            try:
                answers = await self._lookup(parsed)
            except _LookupFailed:
                raise TargetRejected("unresolvable") from None
            return self._judge(parsed, answers)
        except TargetRejected as err:
            # The tenant's message says only "address"; the operator's log keeps why.
            log.info("push target refused at create time", reason=err.reason, host=parsed.host[:253])
            raise

    async def check_attempt(self, url: str) -> ValidatedTarget:
        """Validate before an attempt. As :meth:`check`, except that a failed lookup is
        a network error (:class:`NetworkFailure` ``dns``) or, when it timed out, an
        :class:`AttemptTimeout` ``dns_timeout`` (REQ-7): only a refused address is an
        SSRF rejection."""
        parsed = parse_url(url, allow_http=self._allow_http)
        try:
            answers = await self._lookup(parsed)
        except _LookupFailed as exc:
            if exc.timed_out:
                raise AttemptTimeout(stage="connect", reason="dns_timeout") from None
            raise NetworkFailure(stage="connect", reason="dns") from None
        return self._judge(parsed, answers)

    async def _lookup(self, parsed: ParsedURL) -> list[tuple[IPv4Address | IPv6Address, str]]:
        if parsed.literal is not None and parsed.literal_dial is not None:
            # Never ask a resolver about a literal. A mapped literal is dialled as IPv4.
            mapped = parsed.literal.ipv4_mapped if isinstance(parsed.literal, IPv6Address) else None
            if mapped is not None:
                return [(mapped, str(mapped))]
            return [(parsed.literal, parsed.literal_dial)]
        try:
            # asyncio's own timeout: anyio's cancel scope cost about three times as much per attempt
            async with asyncio.timeout(self._timeout):
                raw = await self._resolver(parsed.host, parsed.port)
        except TimeoutError:
            raise _LookupFailed(timed_out=True) from None
        except Exception:  # gaierror, or anything an injected resolver raises
            raise _LookupFailed(timed_out=False) from None
        try:
            answers = [_parse_answer(a) for a in raw]
        except (TypeError, ValueError):
            raise _LookupFailed(timed_out=False) from None
        if not answers:
            raise _LookupFailed(timed_out=False)
        return answers

    def _judge(
        self, parsed: ParsedURL, answers: list[tuple[IPv4Address | IPv6Address, str]]
    ) -> ValidatedTarget:
        """Refuse the target if any address is refused (REQ-3), else pin them all."""
        ips: list[str] = []
        for addr, dial in answers:
            reason = self._policy.refusal(strip_zone(addr), parsed.port)
            if reason is not None:
                raise TargetRejected(reason)
            if dial not in ips:
                ips.append(dial)
        return ValidatedTarget(parsed.scheme, parsed.host, parsed.port, parsed.path, tuple(ips))
