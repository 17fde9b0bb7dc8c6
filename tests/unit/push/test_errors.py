"""The error taxonomy: classes, stages, reasons, REQ-11 results and retryability."""

from __future__ import annotations

import pytest

from switchboard import push
from switchboard.push import (
    AttemptTimeout,
    NetworkFailure,
    PermanentClientError,
    PushError,
    RedirectRefused,
    RetryableStatus,
    TargetRejected,
    TLSFailure,
)
from switchboard.push._errors import error_for_status


def test_public_api() -> None:
    for name in [
        "Validator",
        "ValidatedTarget",
        "Resolver",
        "PushError",
        "TargetRejected",
        "RedirectRefused",
        "AttemptTimeout",
        "TLSFailure",
        "NetworkFailure",
        "PermanentClientError",
        "RetryableStatus",
        "Sender",
        "AttemptResult",
        "mint_secret",
        "sign",
        "redact_url",
        "USER_AGENT",
        "standard_headers",
    ]:
        assert hasattr(push, name), name
    for cls in (
        TargetRejected,
        RedirectRefused,
        AttemptTimeout,
        TLSFailure,
        NetworkFailure,
        PermanentClientError,
        RetryableStatus,
    ):
        assert issubclass(cls, PushError)


@pytest.mark.parametrize(
    ("error", "stage", "reason", "result", "retryable"),
    [
        (TargetRejected("private"), "validate", "private", "rejected_ssrf", False),
        (TargetRejected("scheme"), "validate", "scheme", "rejected_ssrf", False),
        (AttemptTimeout(stage="response"), "response", "timeout", "timeout", True),
        (AttemptTimeout(stage="connect", reason="dns_timeout"), "connect", "dns_timeout", "timeout", True),
        # REQ-7: every failure without a status but rejected_ssrf is retried, TLS included (issue 14)
        (TLSFailure("hostname_mismatch"), "tls", "hostname_mismatch", "tls", True),
        (TLSFailure("certificate"), "tls", "certificate", "tls", True),
        (TLSFailure("handshake"), "tls", "handshake", "tls", True),
        (NetworkFailure(stage="connect", reason="dns"), "connect", "dns", "network", True),
        (
            NetworkFailure(stage="connect", reason="connection_refused"),
            "connect",
            "connection_refused",
            "network",
            True,
        ),
        (RedirectRefused(302), "response", "redirect", "3xx", False),
        (PermanentClientError(401), "response", "client_error", "4xx", False),
        (PermanentClientError(410), "response", "gone", "4xx", False),
        (PermanentClientError(101), "response", "unexpected_status", "other", False),
        (PermanentClientError(699), "response", "unexpected_status", "other", False),
        (RetryableStatus(408), "response", "request_timeout", "4xx", True),
        (RetryableStatus(429), "response", "rate_limited", "4xx", True),
        (RetryableStatus(502), "response", "server_error", "5xx", True),
    ],
)
def test_taxonomy(error: PushError, stage: str, reason: str, result: str, retryable: bool) -> None:
    assert (error.stage, error.reason, error.result, error.retryable) == (stage, reason, result, retryable)
    assert reason in str(error)
    assert error.duration is None


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (200, None),
        (204, None),
        (299, None),
        (300, RedirectRefused),
        (302, RedirectRefused),
        (304, RedirectRefused),
        (399, RedirectRefused),
        (400, PermanentClientError),
        (403, PermanentClientError),
        (407, PermanentClientError),
        (408, RetryableStatus),
        (409, PermanentClientError),
        (410, PermanentClientError),
        (429, RetryableStatus),
        (451, PermanentClientError),
        (500, RetryableStatus),
        (599, RetryableStatus),
        (600, PermanentClientError),
        (101, PermanentClientError),
    ],
)
def test_status_mapping(status: int, expected: type[PushError] | None) -> None:
    error = error_for_status(status)
    if expected is None:
        assert error is None
    else:
        assert type(error) is expected
        assert error is not None and error.status == status and str(status) in str(error)


def test_fast_fail_is_marked_without_changing_the_taxonomy() -> None:
    plain = NetworkFailure(stage="connect", reason="connection_refused")
    fast = NetworkFailure(stage="connect", reason="connection_refused", fast_fail=True)
    assert (plain.fast_fail, fast.fast_fail) == (False, True)
    assert (fast.stage, fast.reason, fast.result, fast.retryable) == (
        plain.stage,
        plain.reason,
        plain.result,
        plain.retryable,
    )
    assert str(fast) == "push attempt failed during connect (connection_refused; fast-fail, not dialled)"
    for other in (TargetRejected("private"), AttemptTimeout(stage="tls"), TLSFailure("certificate")):
        assert other.fast_fail is False
