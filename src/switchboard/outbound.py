"""The one Validator and Sender a server instance uses for every outbound call (notify hooks, A2A push),
configured from the operator's settings and the test seams on Services."""

from __future__ import annotations

from switchboard.push import Sender, Validator
from switchboard.services import Services


def validator_for(services: Services) -> Validator:
    cached = services.extras.get("validator")
    if isinstance(cached, Validator):
        return cached
    s = services.settings
    listen = [(s.listen_host, s.listen_port)]
    validator = Validator(
        allow_http=s.push_allow_http,
        allow_cidrs=s.allow_cidrs(),
        listen_addresses=listen,
        resolver=services.resolver,
    )
    services.extras["validator"] = validator
    return validator


def sender_for(services: Services) -> Sender:
    cached = services.extras.get("sender")
    if isinstance(cached, Sender):
        return cached
    sender = Sender(validator_for(services), ssl_context=services.ssl_context)
    services.extras["sender"] = sender
    return sender
