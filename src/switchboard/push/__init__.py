"""Outbound HTTP for Switchboard: the SSRF guard, the pinned transport, the signer.

Shared by notify hooks (SPEC-0024) and A2A push notifications; nothing about
validation, dialling or signing is written anywhere else. See docs/push.md.

Typical use::

    validator = Validator(allow_cidrs=settings.allow_cidrs, listen_addresses=[("0.0.0.0", 8080)])
    target = await validator.check(url)          # at create time: TargetRejected on refusal
    sender = Sender(validator)
    headers = standard_headers([secret], msg_id, int(time.time()), body)
    result = await sender.send(url, body=body, headers=headers)   # validates again first
"""

from ._errors import (
    ADDRESS_REASONS,
    AttemptTimeout,
    NetworkFailure,
    PermanentClientError,
    ProxyRefused,
    PushError,
    RedirectRefused,
    ResponseTooLarge,
    RetryableStatus,
    StatusError,
    TargetRejected,
    TLSFailure,
)
from ._proxy import OutboundProxy, parse_proxy_url
from ._signer import mint_secret, new_message_id, sign, standard_headers
from ._transport import USER_AGENT, AttemptResult, Fetched, Sender
from ._urls import redact_url
from ._validator import Resolver, ValidatedTarget, Validator, install_resolver, system_resolver

__all__ = [
    "ADDRESS_REASONS",
    "USER_AGENT",
    "AttemptResult",
    "AttemptTimeout",
    "Fetched",
    "NetworkFailure",
    "OutboundProxy",
    "PermanentClientError",
    "ProxyRefused",
    "PushError",
    "RedirectRefused",
    "Resolver",
    "ResponseTooLarge",
    "RetryableStatus",
    "Sender",
    "StatusError",
    "TLSFailure",
    "TargetRejected",
    "ValidatedTarget",
    "Validator",
    "install_resolver",
    "mint_secret",
    "new_message_id",
    "parse_proxy_url",
    "redact_url",
    "sign",
    "standard_headers",
    "system_resolver",
]
