"""The credential envelope: every held secret is sealed with AES-256-GCM, bound to its row."""

from switchboard.cred.envelope import Envelope, EnvelopeError, load_or_create_key

__all__ = ["Envelope", "EnvelopeError", "load_or_create_key"]
