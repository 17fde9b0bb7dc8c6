"""OAuth Client ID Metadata Documents (draft-ietf-oauth-client-id-metadata-document; MCP 2026-07-28's
way for a client to identify itself): a ``client_id`` that is an ``https`` URL names a JSON document
describing the client, which this server fetches instead of asking the client to register.

Anyone may name any URL at ``/authorize``, so the fetch is the notify hooks' outbound path
(:meth:`switchboard.push.Sender.get`: SSRF guard with its own allowlist, pinned addresses, no
redirects, the attempt timeout), capped at :data:`MAX_DOCUMENT_BYTES`, at most :data:`MAX_IN_FLIGHT`
at once (one per URL), and kept in a bounded in-memory cache for the document's ``max-age`` within
[:data:`MIN_CACHE_SECONDS`, :data:`MAX_CACHE_SECONDS`]. Only public clients are accepted
(``token_endpoint_auth_method`` ``none``). Nothing is stored until a human approves the consent
screen (:mod:`switchboard.web.oauth`). docs/web.md, "Client ID Metadata Documents", is the reference.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from mcp.shared.auth import OAuthClientInformationFull
from pydantic import ValidationError

from switchboard.core.clock import Clock
from switchboard.core.text import storable, summary
from switchboard.core.verbs import ALL_VERBS
from switchboard.obs.logs import get_logger
from switchboard.push import (
    ADDRESS_REASONS,
    AttemptTimeout,
    NetworkFailure,
    PushError,
    RedirectRefused,
    ResponseTooLarge,
    Sender,
    StatusError,
    TargetRejected,
    TLSFailure,
    redact_url,
)
from switchboard.web.redirects import MAX_REDIRECT_URIS, redirect_uri_problem

log = get_logger("switchboard.web.cimd")

MAX_DOCUMENT_BYTES = 5 * 1024  # the draft's suggested cap; a real document is a few hundred bytes
MAX_CLIENT_ID_CHARS = 2048  # the SSRF guard's URL cap
MIN_CACHE_SECONDS = 60.0  # also for no-store / no-cache: one flow reads the client four times
MAX_CACHE_SECONDS = 24 * 3600.0
DEFAULT_CACHE_SECONDS = 300.0  # no Cache-Control max-age
MAX_CACHED = 512
MAX_IN_FLIGHT = 16
DOCUMENT_KEY_PREFIX = "cimd_"

_MEDIA_TYPE = re.compile(r"\s*application/json\s*(?:;.*)?", re.IGNORECASE | re.DOTALL)
_MAX_AGE = re.compile(r"max-age\s*=\s*\"?(\d{1,12})\"?")


class DocumentRefused(Exception):
    """A client metadata document (or its URL) failed a check. ``error`` is the OAuth error code,
    ``description`` names the check, for the client's developer; neither holds the URL's query."""

    def __init__(self, error: str, description: str) -> None:
        super().__init__(description)
        self.error = error
        self.description = description


@dataclass(frozen=True)
class DocumentClient:
    """A checked document: the client as the SDK wants it, and the redirect URIs exactly as written
    (the request's ``redirect_uri`` must equal one of them as a string)."""

    info: OAuthClientInformationFull
    redirect_uris: tuple[str, ...]


def is_document_client_id(client_id: str) -> bool:
    """Whether ``client_id`` is to be read as a metadata document URL (every id starting ``https:``:
    dynamically registered ids are UUIDs)."""
    return client_id[:6].lower() == "https:"


def document_host(client_id: str) -> str:
    """The host of a document client's URL (what the consent screen can vouch for), else ``""``."""
    if not is_document_client_id(client_id):
        return ""
    try:
        return (urlsplit(client_id).hostname or "").lower()
    except ValueError:
        return ""


def stored_id(client_id: str) -> str:
    """The ``oauth_clients`` key of a document client: its codes and grants hang off it, and the column
    holds 64 characters where URLs are longer."""
    return DOCUMENT_KEY_PREFIX + hashlib.sha256(client_id.encode()).hexdigest()[:56]


def stored_key(client_id: str | None) -> str:
    """The stored id of any client: a document client's digest, a registered client's own id."""
    client_id = client_id or ""
    return stored_id(client_id) if is_document_client_id(client_id) else client_id


def client_id_problem(client_id: str) -> str | None:
    """Why ``client_id`` is not a client identifier URL (draft section 3), or None."""
    if len(client_id) > MAX_CLIENT_ID_CHARS:
        return f"it is longer than {MAX_CLIENT_ID_CHARS} characters"
    try:
        parts = urlsplit(client_id)
    except ValueError:
        return "it is not a URL"
    if parts.scheme != "https":
        return "its scheme must be https"
    if not parts.hostname:
        return "it has no host"
    if "@" in parts.netloc:
        return "it must not carry user information"
    if "#" in client_id:
        return "it must not have a fragment"
    if parts.path in ("", "/"):
        return "it must have a path"
    if any(segment in (".", "..") for segment in parts.path.split("/")):
        return "its path must not have . or .. segments"
    return None


def cache_seconds(cache_control: str | None) -> float:
    """How long to keep a document: its ``max-age`` within the bounds, the minimum for ``no-store`` or
    ``no-cache``, :data:`DEFAULT_CACHE_SECONDS` when it says nothing."""
    if not cache_control:
        return DEFAULT_CACHE_SECONDS
    lowered = cache_control.lower()
    if "no-store" in lowered or "no-cache" in lowered:
        return MIN_CACHE_SECONDS
    found = _MAX_AGE.search(lowered)
    if found is None:
        return DEFAULT_CACHE_SECONDS
    return min(max(float(found.group(1)), MIN_CACHE_SECONDS), MAX_CACHE_SECONDS)


def _refused(description: str) -> DocumentRefused:
    return DocumentRefused("invalid_client", description)


def _fetch_failure(err: PushError) -> DocumentRefused:
    """The fetch's failure in words for the client's developer; the operator's log keeps the reason."""
    # A name that does not resolve and one that resolves to a refused address get one answer: anyone may
    # ask, and two answers would map the internal DNS (as TargetRejected.public_message says).
    if isinstance(err, TargetRejected) and err.reason not in ADDRESS_REASONS:
        return DocumentRefused("invalid_request", "client_id is not a URL this server can fetch")
    if isinstance(err, TargetRejected) or (isinstance(err, NetworkFailure) and err.reason == "dns"):
        return _refused(
            "the client metadata document's host does not resolve to an address this server may fetch "
            "from (SSRF guard)"
        )
    if isinstance(err, ResponseTooLarge):
        return _refused(f"the client metadata document is larger than {MAX_DOCUMENT_BYTES} bytes")
    if isinstance(err, RedirectRefused):
        return _refused(
            f"the client metadata document URL answered a redirect (HTTP {err.status}); redirects are "
            "not followed"
        )
    if isinstance(err, StatusError):
        return _refused(f"the client metadata document URL answered HTTP {err.status}; 200 is required")
    if isinstance(err, AttemptTimeout):
        return _refused("fetching the client metadata document timed out")
    if isinstance(err, TLSFailure):
        return _refused(f"the client metadata document's TLS connection failed ({err.reason})")
    return _refused(f"the client metadata document could not be fetched ({err.reason})")


def parse_document(client_id: str, body: bytes, content_type: str | None) -> DocumentClient:
    """Check a fetched document against the draft's rules and this server's (public clients only)."""
    if content_type is None or not _MEDIA_TYPE.fullmatch(content_type):
        raise _refused("the client metadata document is not served as application/json")
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise _refused("the client metadata document is not JSON") from None
    if not isinstance(doc, dict):
        raise _refused("the client metadata document is not a JSON object")
    if doc.get("client_id") != client_id:
        raise _refused("the client metadata document's client_id does not equal the URL it was fetched from")
    if "client_secret" in doc or "client_secret_expires_at" in doc:
        raise _refused("a client metadata document must not carry a client secret")
    if doc.get("token_endpoint_auth_method", "none") != "none":
        raise _refused(
            'token_endpoint_auth_method must be "none": this server accepts metadata documents of '
            "public clients only (no client secrets, no private_key_jwt)"
        )
    uris = doc.get("redirect_uris")
    if not isinstance(uris, list) or not uris or not all(isinstance(u, str) for u in uris):
        raise _refused("the client metadata document needs redirect_uris, a list of URL strings")
    if len(uris) > MAX_REDIRECT_URIS:
        raise _refused(f"the client metadata document has more than {MAX_REDIRECT_URIS} redirect_uris")
    for uri in uris:
        problem = redirect_uri_problem(uri)
        if problem:
            raise _refused(f"the client metadata document's redirect_uris: {problem}")
    return _client(client_id, doc, uris)


def _client(client_id: str, doc: dict[str, Any], uris: list[str]) -> DocumentClient:
    grants = doc.get("grant_types", ["authorization_code", "refresh_token"])
    if not isinstance(grants, list) or "authorization_code" not in grants:
        raise _refused("the client metadata document's grant_types must include authorization_code")
    name = doc.get("client_name")
    website = doc.get("client_uri")
    fields: dict[str, Any] = {
        "client_id": client_id,
        "redirect_uris": uris,
        "token_endpoint_auth_method": "none",
        "grant_types": [g for g in grants if g in ("authorization_code", "refresh_token")],
        "response_types": ["code"],
        # Shown on the consent screen, marked as the client's own claim: one line of visible words.
        "client_name": summary(storable(name), 200) or None if isinstance(name, str) else None,
        "client_uri": website if isinstance(website, str) and website.startswith("https://") else None,
        "scope": " ".join(sorted(ALL_VERBS)),  # the consent screen decides; see OAuthProvider.get_client
    }
    try:
        info = OAuthClientInformationFull.model_validate(fields)
    except ValidationError as exc:
        where = ".".join(str(part) for part in exc.errors()[0]["loc"]) or "document"
        raise _refused(f"the client metadata document is not valid client metadata ({where})") from None
    return DocumentClient(info, tuple(uris))


class ClientDocuments:
    """Fetch, check and cache client metadata documents. ``sender`` is called once, on first use (the
    Sender belongs to the serving event loop); ``clock`` times the cache."""

    def __init__(self, sender: Callable[[], Sender], clock: Clock) -> None:
        self._make_sender = sender
        self._sender: Sender | None = None
        self._clock = clock
        self._cache: OrderedDict[str, tuple[float, DocumentClient]] = OrderedDict()
        self._in_flight: dict[str, asyncio.Task[DocumentClient]] = {}

    async def resolve(self, client_id: str) -> DocumentClient:
        """The checked document of ``client_id``, from the cache or fetched; :class:`DocumentRefused`
        says which check failed."""
        problem = client_id_problem(client_id)
        if problem:
            raise DocumentRefused(
                "invalid_request", f"client_id is not a client metadata document URL: {problem}"
            )
        hit = self._cache.get(client_id)
        if hit is not None:
            if hit[0] > self._clock.now():
                self._cache.move_to_end(client_id)
                return hit[1]
            del self._cache[client_id]
        task = self._in_flight.get(client_id)
        if task is None:
            if len(self._in_flight) >= MAX_IN_FLIGHT:
                raise _refused("too many client metadata documents are being fetched; retry shortly")
            task = asyncio.ensure_future(self._fetch(client_id))
            self._in_flight[client_id] = task
            task.add_done_callback(lambda done: self._done(client_id, done))
        return await asyncio.shield(task)  # a caller that gives up does not cancel the others' fetch

    def _done(self, client_id: str, task: asyncio.Task[DocumentClient]) -> None:
        self._in_flight.pop(client_id, None)
        if not task.cancelled():
            task.exception()  # retrieved: a fetch whose callers all left is not "never retrieved"

    async def _fetch(self, client_id: str) -> DocumentClient:
        shown = redact_url(client_id)
        if self._sender is None:
            self._sender = self._make_sender()
        try:
            got = await self._sender.get(
                client_id, max_body=MAX_DOCUMENT_BYTES, headers={"accept": "application/json"}
            )
            if got.status != 200:
                raise _refused(
                    f"the client metadata document URL answered HTTP {got.status}; 200 is required"
                )
            client = parse_document(client_id, got.body, got.header("content-type"))
        except PushError as err:
            log.info("client metadata document refused", url=shown, stage=err.stage, reason=err.reason)
            raise _fetch_failure(err) from None
        except DocumentRefused as err:
            log.info("client metadata document refused", url=shown, reason=err.description)
            raise
        ttl = cache_seconds(got.header("cache-control"))
        self._cache[client_id] = (self._clock.now() + ttl, client)
        self._cache.move_to_end(client_id)
        while len(self._cache) > MAX_CACHED:
            self._cache.popitem(last=False)
        log.info("client metadata document fetched", url=shown, cache_seconds=ttl)
        return client
