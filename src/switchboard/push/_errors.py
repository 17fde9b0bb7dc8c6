"""The push error taxonomy.

One hierarchy that callers can catch at the level they care about: ``PushError`` for
"this attempt failed", or a subclass when the reaction differs (SPEC-0024 REQ-8 and
REQ-11 classify on these). Every error carries the ``stage`` that failed and a stable,
one-word ``reason`` that errors, metrics and logs share.

Messages are built only from those words and the HTTP status. They never contain the
URL (its query string may hold a credential), a secret, a signature, or any text the
receiver sent back. The transport raises these ``from None`` so that a library's own
message (h11 quotes the bytes it could not parse) cannot reach a log through the
exception chain.
"""

from __future__ import annotations

from typing import Literal

Stage = Literal["validate", "connect", "tls", "send", "response"]
"""Where an attempt failed: the URL check, TCP connect, TLS handshake, writing the
request, or reading the response."""

AttemptResultLabel = Literal[
    "2xx", "3xx", "4xx", "5xx", "timeout", "network", "tls", "rejected_ssrf", "other"
]
"""The REQ-11 ``result`` label of an attempt (``other`` only for statuses outside 2xx-5xx)."""

#: Address-class reasons a TargetRejected can carry (the URL-shape reasons are below).
ADDRESS_REASONS = frozenset(
    {
        "loopback",
        "private",
        "link_local",
        "unique_local",
        "unspecified",
        "multicast",
        "cgnat",
        "metadata",
        "self",
        "reserved",
    }
)
#: Reasons a tenant sees only as "address" (see TargetRejected).
OPAQUE_REASONS = ADDRESS_REASONS | {"unresolvable"}

_REJECT_TEXT = {
    "scheme": "the scheme must be https (or http when the operator allows it)",
    "userinfo": "the URL must not carry userinfo (user:password@)",
    "too_long": "the URL is longer than 2048 bytes",
    "malformed": "the URL is malformed",
    "unresolvable": "the host does not resolve",
    "self": "the target is one of Switchboard's own listen addresses",
}


class PushError(Exception):
    """Base class: one outbound attempt, or its target, failed.

    ``duration`` is filled in by :class:`~switchboard.push.Sender` (seconds spent on the
    attempt) so that the per-attempt log line REQ-11 asks for can be written from the
    error alone.
    """

    stage: Stage
    reason: str
    duration: float | None
    fast_fail: bool

    def __init__(self, message: str, *, stage: Stage, reason: str) -> None:
        super().__init__(message)
        self.stage = stage
        self.reason = reason
        self.duration = None
        self.fast_fail = False

    @property
    def result(self) -> AttemptResultLabel:
        """The REQ-11 attempt result label for this failure."""
        raise NotImplementedError  # every concrete subclass overrides this

    @property
    def retryable(self) -> bool:
        """Whether REQ-7 allows another attempt of the same notification."""
        return False


class TargetRejected(PushError):
    """The SSRF guard refused the URL or an address it resolved to. Never retried."""

    def __init__(self, reason: str) -> None:
        if reason in ADDRESS_REASONS and reason != "self":
            text = f"the target address is in a refused class: {reason}"
        else:
            text = _REJECT_TEXT.get(reason, reason)
        super().__init__(f"push target rejected ({reason}): {text}", stage="validate", reason=reason)

    @property
    def public_message(self) -> str:
        """``str(self)`` as a tenant may see it. Whether a name does not resolve, or resolves to a private,
        loopback or metadata address, is one answer, ``address``, or a tenant could map internal DNS with
        it; :attr:`reason` and ``str(self)`` keep the detail for the operator's log and metrics."""
        if self.reason in OPAQUE_REASONS:
            return (
                "push target rejected (address): the host does not resolve to an address this server may call"
            )
        return str(self)

    @property
    def result(self) -> AttemptResultLabel:
        return "rejected_ssrf"


class AttemptTimeout(PushError):
    """The attempt ran out of time. ``reason`` is ``dns_timeout`` for the name lookup and
    ``timeout`` otherwise; ``stage`` says which step was running."""

    def __init__(self, *, stage: Stage, reason: str = "timeout") -> None:
        super().__init__(f"push attempt timed out during {stage} ({reason})", stage=stage, reason=reason)

    @property
    def result(self) -> AttemptResultLabel:
        return "timeout"

    @property
    def retryable(self) -> bool:
        return True


class TLSFailure(PushError):
    """The TLS handshake failed.

    ``reason``: ``hostname_mismatch`` (the certificate is not for the URL's host),
    ``certificate`` (any other verification failure: untrusted, expired, ...) or
    ``handshake`` (the handshake broke off). Every one is retryable, like any failure
    without a status (REQ-7 ends a notification early only on a status or on
    ``rejected_ssrf``): a certificate can fail during a renewal, or on one bad node
    behind a load balancer, and be fine on the next attempt.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(f"push attempt failed TLS ({reason})", stage="tls", reason=reason)

    @property
    def result(self) -> AttemptResultLabel:
        return "tls"

    @property
    def retryable(self) -> bool:
        return True


class NetworkFailure(PushError):
    """A network-level failure: ``dns`` (the host did not resolve at attempt time),
    ``connection_refused``, ``unreachable``, ``connect_failed``, ``connection_lost``
    or ``protocol`` (the receiver did not speak valid HTTP/1.1); through an egress proxy also
    ``proxy_unreachable``, ``proxy_refused`` (:class:`ProxyRefused`) or ``proxy_protocol``. Retryable.

    ``fast_fail`` is true when nothing was dialled because the origin refused (or was
    unreachable for) a connection moments ago (docs/push.md, "Fast-fail"); ``stage`` and
    ``reason`` are then those of that refusal, so ``result`` stays ``network``."""

    def __init__(self, *, stage: Stage, reason: str, fast_fail: bool = False) -> None:
        note = "; fast-fail, not dialled" if fast_fail else ""
        super().__init__(f"push attempt failed during {stage} ({reason}{note})", stage=stage, reason=reason)
        self.fast_fail = fast_fail

    @property
    def result(self) -> AttemptResultLabel:
        return "network"

    @property
    def retryable(self) -> bool:
        return True


class ProxyRefused(NetworkFailure):
    """The egress proxy (``SWITCHBOARD_OUTBOUND_PROXY``) answered CONNECT with a non-2xx status
    (``proxy_status``: 403 for a destination its rules deny, 407 for wrong credentials, 502 when it could
    not reach the address). Not the receiver's status: nothing reached the receiver, so it is a connect
    failure (``network``), retried like one. The proxy's other failures are plain ``NetworkFailure``s:
    ``proxy_unreachable`` and ``proxy_protocol``."""

    proxy_status: int

    def __init__(self, proxy_status: int) -> None:
        message = f"push attempt failed during connect (proxy_refused: the proxy answered {proxy_status})"
        PushError.__init__(self, message, stage="connect", reason="proxy_refused")
        self.proxy_status = proxy_status


class StatusError(PushError):
    """Base for failures that carry the receiver's HTTP status in ``status``."""

    status: int

    def __init__(self, status: int, *, reason: str, what: str) -> None:
        super().__init__(
            f"push receiver answered {status} ({reason}: {what})", stage="response", reason=reason
        )
        self.status = status

    @property
    def result(self) -> AttemptResultLabel:
        band = self.status // 100
        if band == 3:
            return "3xx"
        if band == 4:
            return "4xx"
        if band == 5:
            return "5xx"
        return "other"


class RedirectRefused(StatusError):
    """The receiver answered 3xx. Redirects are never followed (REQ-3) and the Location
    is never dialled; the attempt fails with the status and is not retried."""

    def __init__(self, status: int) -> None:
        super().__init__(status, reason="redirect", what="redirects are not followed")


class PermanentClientError(StatusError):
    """A status that ends the notification: every 4xx but 408 and 429, or anything
    outside 2xx-5xx. ``reason`` is ``gone`` for 410 (the receiver asks to be
    forgotten), ``client_error`` for other 4xx, ``unexpected_status`` otherwise."""

    def __init__(self, status: int) -> None:
        if status == 410:
            reason = "gone"
        elif 400 <= status < 500:
            reason = "client_error"
        else:
            reason = "unexpected_status"
        super().__init__(status, reason=reason, what="not retried")


class RetryableStatus(StatusError):
    """408, 429 or 5xx: retried (REQ-7). ``reason`` is ``request_timeout``,
    ``rate_limited`` or ``server_error``. ``retry_after`` holds the receiver's
    ``Retry-After`` in seconds when it sent the delta-seconds form, else ``None``."""

    retry_after: float | None

    def __init__(self, status: int, *, retry_after: float | None = None) -> None:
        if status == 408:
            reason = "request_timeout"
        elif status == 429:
            reason = "rate_limited"
        else:
            reason = "server_error"
        super().__init__(status, reason=reason, what="retryable")
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        return True


class ResponseTooLarge(PushError):
    """A fetched body (or its Content-Length) was over the caller's cap: nothing of it is used."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"response body is larger than {limit} bytes", stage="response", reason="too_large")

    @property
    def result(self) -> AttemptResultLabel:
        return "other"


def error_for_status(status: int, *, retry_after: float | None = None) -> StatusError | None:
    """Classify a final HTTP status: ``None`` for 2xx (delivered), else the error to raise."""
    if 200 <= status < 300:
        return None
    if 300 <= status < 400:
        return RedirectRefused(status)
    if status in (408, 429) or 500 <= status < 600:
        return RetryableStatus(status, retry_after=retry_after)
    return PermanentClientError(status)
