"""Fixtures for the push transport tests: a fresh trustme CA per test."""

from tests.support.receivers import trustme_ca

__all__ = ["trustme_ca"]
