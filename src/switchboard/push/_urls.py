"""URL parsing for the SSRF guard, and redaction for logs.

The guard parses the URL once, here, into the exact components the transport will
dial (scheme, ASCII host, port, request target). The transport never re-parses the
string, so the check and the dial cannot disagree about the host (no parser
differential). Parsing is deliberately strict: anything a browser, curl, or a
resolver might read two ways is ``malformed``.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address
from urllib.parse import quote, urlsplit

import idna

from ._errors import TargetRejected

MAX_URL_BYTES = 2048
_DEFAULT_PORTS = {"https": 443, "http": 80}
#: inet_aton syntax: one to four parts, each decimal, octal (leading 0) or hex (0x).
_INET_ATON = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]+)){0,3}")
#: WHATWG "ends in a number": such a host must be an IPv4 literal, or it is invalid.
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*")
_LABEL = re.compile(r"[a-z0-9_-]{1,63}")
_ZONE = re.compile(r"[A-Za-z0-9._~-]+")
#: Characters left as they are in the request target; everything else is %-encoded.
_PATH_SAFE = "/:@!$&'()*+,;=%-._~"
_QUERY_SAFE = _PATH_SAFE + "?"


@dataclass(frozen=True)
class ParsedURL:
    """A URL reduced to what will be dialled. ``literal`` is set for IP-literal hosts;
    ``literal_dial`` is that literal as it will be dialled (IPv6 keeps its zone)."""

    scheme: str
    host: str
    port: int
    path: str
    literal: IPv4Address | IPv6Address | None
    literal_dial: str | None


def _has_forbidden_char(url: str) -> bool:
    # C0 controls and space, DEL and C1 controls, and backslash (which WHATWG parsers
    # treat as "/" but urlsplit does not: a classic parser differential).
    return any(ord(c) <= 0x20 or 0x7F <= ord(c) <= 0x9F or c == "\\" for c in url)


def _split_netloc(netloc: str) -> tuple[str, bool, str | None]:
    """Split ``host[:port]`` into (host, bracketed, port text). Raises TargetRejected."""
    if netloc.startswith("["):
        end = netloc.find("]")
        if end < 0:
            raise TargetRejected("malformed")
        host, rest = netloc[1:end], netloc[end + 1 :]
        bracketed = True
    else:
        host, sep, port = netloc.partition(":")
        rest = sep + port
        bracketed = False
        if "[" in host or "]" in host:
            raise TargetRejected("malformed")
    if rest and not rest.startswith(":"):
        raise TargetRejected("malformed")
    return host, bracketed, rest[1:] if rest else None


def _parse_port(text: str | None, scheme: str) -> int:
    if text is None:
        return _DEFAULT_PORTS[scheme]
    # isdigit() alone accepts non-ASCII digits that int() would happily read.
    if not (text.isascii() and text.isdigit() and len(text) <= 5):
        raise TargetRejected("malformed")
    port = int(text)
    if not 1 <= port <= 65535:
        raise TargetRejected("malformed")
    return port


def _parse_bracketed(host: str) -> tuple[IPv6Address, str]:
    """An IPv6 literal from inside brackets, with an optional RFC 6874 ``%25zone``."""
    zone = None
    if "%" in host:
        host, _, zone_part = host.partition("%")
        if not zone_part.startswith("25") or not _ZONE.fullmatch(zone_part[2:]):
            raise TargetRejected("malformed")
        zone = zone_part[2:]
    try:
        addr = IPv6Address(host)
    except ValueError:
        raise TargetRejected("malformed") from None  # also IPv4-in-brackets and IPvFuture
    return addr, f"{addr.compressed}%{zone}" if zone else addr.compressed


def _canonical_name(host: str) -> str:
    """IDNA ASCII, lower-case, one trailing dot removed."""
    if host.isascii():
        ascii_host = host.lower()
    else:
        try:
            # UTS #46 mapping, as browsers do: full-width digits and ideographic full
            # stops become ASCII here, so they meet the IPv4-literal test below.
            ascii_host = idna.encode(host, uts46=True, transitional=False).decode("ascii")
        except (idna.IDNAError, UnicodeError, ValueError):
            raise TargetRejected("malformed") from None
    ascii_host = ascii_host.lower()
    if ascii_host.endswith("."):
        ascii_host = ascii_host[:-1]
    return ascii_host


def _parse_host(host: str) -> tuple[str, IPv4Address | None]:
    """The canonical host and, for an IPv4 literal in any inet_aton form, its address."""
    if not host or "%" in host:
        raise TargetRejected("malformed")  # percent-decoding hosts is where parsers disagree
    name = _canonical_name(host)
    if not name or len(name) > 253:
        raise TargetRejected("malformed")
    labels = name.split(".")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        # 2130706433, 0177.0.0.1, 127.1, 0x7f.1: the resolver would read these as
        # IPv4 with inet_aton semantics, so we do the same and never resolve them.
        if not _INET_ATON.fullmatch(name):
            raise TargetRejected("malformed")
        try:
            packed = socket.inet_aton(name)
        except OSError:
            raise TargetRejected("malformed") from None
        addr = IPv4Address(packed)
        return str(addr), addr
    if not all(_LABEL.fullmatch(label) for label in labels):
        raise TargetRejected("malformed")
    return name, None


def _request_target(path: str, query: str) -> str:
    target = quote(path, safe=_PATH_SAFE) if path else "/"
    if not target.startswith("/"):
        raise TargetRejected("malformed")
    if query:
        target += "?" + quote(query, safe=_QUERY_SAFE)
    return target


def parse_url(url: str, *, allow_http: bool) -> ParsedURL:
    """Parse and canonicalise a hook URL (REQ-3 steps 1-3). Raises TargetRejected."""
    if not isinstance(url, str):
        raise TargetRejected("malformed")
    try:
        size = len(url.encode("utf-8"))
    except UnicodeEncodeError:
        raise TargetRejected("malformed") from None
    if size > MAX_URL_BYTES:
        raise TargetRejected("too_long")
    if _has_forbidden_char(url):
        raise TargetRejected("malformed")
    try:
        parts = urlsplit(url)
    except ValueError:
        raise TargetRejected("malformed") from None
    allowed = ("https", "http") if allow_http else ("https",)
    if parts.scheme not in allowed:
        raise TargetRejected("scheme")
    if "@" in parts.netloc:
        raise TargetRejected("userinfo")
    if not parts.netloc:
        raise TargetRejected("malformed")
    host_text, bracketed, port_text = _split_netloc(parts.netloc)
    port = _parse_port(port_text, parts.scheme)
    path = _request_target(parts.path, parts.query)
    if bracketed:
        v6, dial = _parse_bracketed(host_text)
        return ParsedURL(parts.scheme, v6.compressed, port, path, v6, dial)
    host, v4 = _parse_host(host_text)
    return ParsedURL(parts.scheme, host, port, path, v4, str(v4) if v4 is not None else None)


def format_origin(scheme: str, host: str, port: int) -> str:
    """``scheme://host[:port]`` with IPv6 hosts bracketed and default ports left out."""
    return f"{scheme}://{format_authority(scheme, host, port)}"


def format_authority(scheme: str, host: str, port: int) -> str:
    """``host[:port]`` as the Host header carries it."""
    shown = f"[{host}]" if ":" in host else host
    return shown if _DEFAULT_PORTS.get(scheme) == port else f"{shown}:{port}"


def redact_url(url: str) -> str:
    """``scheme://host[:port]/path`` with the query replaced by ``?[redacted]``.

    For logs and the UI (REQ-10, REQ-11). Userinfo and the fragment are dropped, odd
    characters are %-encoded so a log line cannot be split, and it never raises.
    """
    try:
        parts = urlsplit(str(url))
        if not parts.scheme or not parts.netloc or parts.hostname is None:
            return "[unparsable url]"
        try:
            port = parts.port
        except ValueError:
            port = None
        host = parts.hostname
        shown_host = f"[{host}]" if ":" in host else host
        if port is None or _DEFAULT_PORTS.get(parts.scheme) == port:
            authority = shown_host
        else:
            authority = f"{shown_host}:{port}"
        path = quote(parts.path, safe=_PATH_SAFE)
        query = "?[redacted]" if parts.query else ""
        return quote(f"{parts.scheme}://{authority}", safe=":/[]%") + path + query
    except Exception:  # a logging helper must not fail the caller
        return "[unparsable url]"
