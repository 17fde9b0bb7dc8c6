"""The shapes of a push notification config, apart from its SQL (configs.py), so the task store and the
views can name them without importing the config store: configs imports tasks, and a type back the other
way would close a circle (tests/unit/test_import_graph.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from switchboard.store.push_configs import ConfigView as ConfigView  # re-exported: its home moved

SIGNING_SCHEME: Final = "StandardWebhooks"


@dataclass(frozen=True, slots=True)
class ConfigInput:
    """A validated config, ready to store. Holds secrets: never log or repr it."""

    config_id: str
    url: str
    url_display: str
    host: str
    token: str | None
    scheme: str | None
    credentials: str | None
    minted: bool  # credentials are a signing secret minted here (reveal once)
    # The caller sent the redaction placeholder back: keep the stored value of that field.
    keep_url: bool = False
    keep_token: bool = False
    keep_credentials: bool = False

    def __repr__(self) -> str:
        return f"ConfigInput(config_id={self.config_id!r}, url={self.url_display!r})"

    @property
    def keeps(self) -> bool:
        return self.keep_url or self.keep_token or self.keep_credentials


@dataclass(frozen=True, slots=True)
class SendableConfig:
    """What one delivery attempt needs, read fresh right before it starts. Holds secrets."""

    row_id: str
    url: str
    token: str | None
    scheme: str | None
    credentials: str | None
    granted: bool = True  # the owning endpoint still holds a2a_push_config (read with the config)
    owner_endpoint_id: str | None = None  # whose task it is: its delivery-log row names it (issue 29)

    def __repr__(self) -> str:
        return f"SendableConfig(row_id={self.row_id!r})"
