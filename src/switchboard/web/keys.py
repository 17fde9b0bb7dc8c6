"""The web UI's signing keys: cookie signatures, CSRF tokens and signed OAuth requests.

The one module that imports itsdangerous. The key is ``SWITCHBOARD_SESSION_SECRET`` when set, else
derived from the cred envelope key with HKDF-SHA256, so a fresh install needs no extra setting and every
instance sharing ``SWITCHBOARD_CRED_KEY`` accepts the others' cookies. Each use has its own HKDF
``info`` or itsdangerous salt, so a value signed for one purpose never verifies for another.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from itsdangerous import BadSignature, Signer, URLSafeTimedSerializer

from switchboard.cred import load_or_create_key
from switchboard.settings import Settings

_SESSION_SALT = "switchboard.web.session-cookie"
_OAUTH_SALT = "switchboard.web.oauth-request"


def derive_key(settings: Settings) -> bytes:
    """32 bytes for the web UI, never the cred key itself."""
    if settings.session_secret:
        if len(settings.session_secret) < 32:
            raise ValueError("SWITCHBOARD_SESSION_SECRET must be at least 32 characters")
        material = settings.session_secret.encode()
    else:
        material = load_or_create_key(settings.cred_key, settings.data_dir)
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"switchboard web ui v1").derive(
        material
    )


class Keys:
    def __init__(self, key: bytes) -> None:
        self._key = key
        self._cookie = Signer(key, salt=_SESSION_SALT, digest_method=hashlib.sha256)
        self._requests = URLSafeTimedSerializer(
            key, salt=_OAUTH_SALT, signer_kwargs={"digest_method": hashlib.sha256}
        )

    # -- the session cookie --------------------------------------------------------------------

    def sign_cookie(self, session_id: str) -> str:
        return self._cookie.sign(session_id).decode()

    def open_cookie(self, value: str) -> str | None:
        try:
            return self._cookie.unsign(value).decode()
        except (BadSignature, UnicodeDecodeError):
            return None

    # -- CSRF ----------------------------------------------------------------------------------

    def csrf_token(self, session_id: str) -> str:
        """Bound to the browser's session id: a token lifted from one session is useless in another."""
        return hmac.new(self._key, b"csrf:" + session_id.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, session_id: str, presented: object) -> bool:
        return isinstance(presented, str) and hmac.compare_digest(self.csrf_token(session_id), presented)

    # -- OAuth authorization requests ------------------------------------------------------------

    def sign_request(self, data: dict[str, Any]) -> str:
        """An /authorize request carried to the consent screen, tamper-proof and stateless (any instance
        can finish it). It holds no secret: the PKCE challenge and state are public by design."""
        return self._requests.dumps(json.dumps(data, separators=(",", ":"), sort_keys=True))

    def open_request(self, blob: str, max_age: int) -> dict[str, Any] | None:
        try:
            raw = self._requests.loads(blob, max_age=max_age)
            data = json.loads(raw)
        except (BadSignature, ValueError, TypeError):
            return None
        return data if isinstance(data, dict) else None
