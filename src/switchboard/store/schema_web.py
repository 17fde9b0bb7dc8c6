"""Web UI sessions and MCP OAuth tables, on the shared metadata. Migration 0004.

Nothing here holds a credential in clear: session ids, authorization codes and OAuth tokens are stored
as SHA-256 of 256-bit random values (a fast hash is enough for values that cannot be guessed), and an
OAuth client's secret is sealed by the cred envelope (the SDK's client authenticator compares it in
clear, so it must be recoverable) with ``"oauth_clients:<client id>:secret"`` as associated data.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Column, ForeignKey, LargeBinary, String, Table, Text

from switchboard.store.schema import metadata

__all__ = ["metadata", "oauth_clients", "oauth_codes", "oauth_grants", "oauth_tokens", "web_sessions"]

# A signed-in human's browser session. The cookie carries the id; the row makes sign-out and expiry
# hold on every instance.
web_sessions = Table(
    "web_sessions",
    metadata,
    Column("id_hash", String(64), primary_key=True),
    Column("human_id", String(40), ForeignKey("humans.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("created_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=False, index=True),
)

# Dynamically registered OAuth clients (RFC 7591). ``info`` is the registration record as JSON,
# without the secret.
oauth_clients = Table(
    "oauth_clients",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("client_name", String(200), nullable=True),
    Column("info", Text, nullable=False),
    Column("secret_enc", LargeBinary, nullable=True),
    Column("created_at", BigInteger, nullable=False),
    # Set when a consent is first exchanged: a registration never used within a day is swept.
    Column("first_grant_at", BigInteger, nullable=True),
)

# A code is minted when the human approves the consent screen; exchanging it deletes it (single use).
oauth_codes = Table(
    "oauth_codes",
    metadata,
    Column("code_hash", String(64), primary_key=True),
    Column(
        "client_id",
        String(64),
        ForeignKey("oauth_clients.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    Column("human_id", String(40), ForeignKey("humans.id", ondelete="CASCADE"), nullable=False),
    Column("endpoint_id", String(40), ForeignKey("endpoints.id", ondelete="CASCADE"), nullable=False),
    Column("verbs", Text, nullable=False),  # JSON list
    Column("code_challenge", String(128), nullable=False),
    Column("redirect_uri", Text, nullable=False),
    Column("redirect_uri_explicit", Boolean, nullable=False),
    Column("resource", Text, nullable=True),
    Column("expires_at", BigInteger, nullable=False, index=True),
    Column("created_at", BigInteger, nullable=False),
)

# What the human consented to: one client acting as one endpoint with these verbs. Revoking deletes
# the grant and, by cascade, every token issued under it.
oauth_grants = Table(
    "oauth_grants",
    metadata,
    Column("id", String(40), primary_key=True),
    Column(
        "client_id",
        String(64),
        ForeignKey("oauth_clients.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    Column("human_id", String(40), ForeignKey("humans.id", ondelete="CASCADE"), nullable=False),
    Column(
        "endpoint_id", String(40), ForeignKey("endpoints.id", ondelete="CASCADE"), nullable=False, index=True
    ),
    Column("verbs", Text, nullable=False),  # JSON list
    Column("resource", Text, nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("last_used_at", BigInteger, nullable=True),
)

oauth_tokens = Table(
    "oauth_tokens",
    metadata,
    Column("token_hash", String(64), primary_key=True),
    Column(
        "grant_id", String(40), ForeignKey("oauth_grants.id", ondelete="CASCADE"), nullable=False, index=True
    ),
    Column("kind", String(8), nullable=False),  # access | refresh
    Column("verbs", Text, nullable=False),  # JSON list, a subset of the grant's
    Column("expires_at", BigInteger, nullable=False, index=True),
    # A refresh token is single use: rotated_at is set when it is exchanged; presenting it again
    # revokes the whole grant (refresh token reuse detection).
    Column("rotated_at", BigInteger, nullable=True),
    Column("created_at", BigInteger, nullable=False),
)
