"""Which redirect URIs an OAuth client may use, for registered clients and metadata documents alike."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

MAX_REDIRECT_URIS = 10
_FORBIDDEN_SCHEMES = {
    "javascript",
    "data",
    "file",
    "vbscript",
    "about",
    "blob",
    "filesystem",
    "ftp",
    "ws",
    "wss",
}
_LOOPBACK = {"localhost", "127.0.0.1", "::1"}

_NETLOC = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\])(?::\d{1,5})?"
)


def redirect_uri_problem(uri: str) -> str | None:
    """Why a redirect URI may not be registered, or None. https anywhere, http on loopback only (RFC
    8252 native apps), or an app's private-use scheme such as ``cursor://``; never a scheme a browser
    would run or read locally."""
    if len(uri) > 2000:
        return "redirect URI is too long"
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if parts.fragment:
        return "redirect URI must not have a fragment"
    if "@" in parts.netloc:
        return "redirect URI must not carry user information"
    if parts.netloc and not _NETLOC.fullmatch(parts.netloc):
        # The origin goes into the consent page's CSP form-action: only a plain host[:port] may.
        return "redirect URI host must be a DNS name or an IP address, with an optional port"
    if scheme == "https":
        return None if parts.hostname else "https redirect URI needs a host"
    if scheme == "http":
        return None if (parts.hostname or "") in _LOOPBACK else "http redirect URIs must be on loopback"
    if not scheme or scheme in _FORBIDDEN_SCHEMES:
        return f"redirect URI scheme {scheme or '(none)'!r} is not allowed"
    return None
