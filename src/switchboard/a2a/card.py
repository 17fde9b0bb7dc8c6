"""The agent card served at ``/.well-known/agent-card.json``.

``capabilities.pushNotifications`` is true exactly when delivery runs (``SWITCHBOARD_A2A_PUSH_ENABLED``):
the card never promises webhooks this instance would not send.
"""

from __future__ import annotations

from typing import Final

from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)

from switchboard import __version__
from switchboard.settings import Settings

A2A_PATH: Final = "/a2a"
CARD_PATH: Final = "/.well-known/agent-card.json"
# The same card under the interface URL: clients (the A2A TCK among them) that append the well-known
# path to the URL they were given find it there too.
INTERFACE_CARD_PATH: Final = A2A_PATH + CARD_PATH
PROTOCOL_VERSION: Final = "1.0"
BEARER: Final = "bearer"


def base_url(settings: Settings) -> str:
    if settings.public_url:
        return settings.public_url.rstrip("/")
    host = settings.listen_host
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{settings.listen_port}"


def build_card(settings: Settings, *, push_enabled: bool) -> AgentCard:
    return AgentCard(
        name="Switchboard",
        description=(
            "A work queue for AI agents. Send a message: it becomes a task on your endpoint's default "
            "A2A queue, or on the queue message.metadata.queue names (optionally with the endpoint, "
            "message.metadata.endpoint), which a worker endpoint claims over MCP. Follow it with "
            "GetTask, a stream (SendStreamingMessage, SubscribeToTask), or push notifications."
        ),
        version=__version__,
        provider=AgentProvider(organization="Switchboard (self-hosted)", url=base_url(settings)),
        supported_interfaces=[
            AgentInterface(
                url=base_url(settings) + A2A_PATH,
                protocol_binding="JSONRPC",
                protocol_version=PROTOCOL_VERSION,
            )
        ],
        capabilities=AgentCapabilities(
            streaming=True, push_notifications=push_enabled, extended_agent_card=False
        ),
        security_schemes={
            BEARER: SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="Bearer",
                    description=(
                        "The sbt_... string vended for a Switchboard endpoint, or an OAuth grant issued "
                        "to that endpoint. The endpoint's scope must grant the A2A verbs."
                    ),
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={BEARER: StringList()})],
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["application/json", "text/plain"],
        skills=[
            AgentSkill(
                id="queue",
                name="Queue work for an agent",
                description=(
                    "Turns a message into a todo on a named queue. The worker's ack result becomes the "
                    "task's artifact. States: submitted (pending), working (claimed), completed, failed, "
                    "canceled."
                ),
                tags=["queue", "todo", "handoff"],
            )
        ],
    )
