"""The rules of client metadata documents that need no network: the client_id URL, the cache
lifetime and the document's content (the fetch and the flow: tests/integration/web/test_cimd.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from switchboard.web.cimd import (
    DEFAULT_CACHE_SECONDS,
    MAX_CACHE_SECONDS,
    MIN_CACHE_SECONDS,
    DocumentRefused,
    cache_seconds,
    client_id_problem,
    is_document_client_id,
    parse_document,
    stored_id,
)

URL = "https://app.example/oauth/client.json"


@pytest.mark.parametrize(
    ("client_id", "problem"),
    [
        (URL, None),
        ("https://app.example:8443/c?tenant=1", None),
        ("http://app.example/c.json", "scheme must be https"),
        ("https://app.example", "must have a path"),
        ("https://app.example/", "must have a path"),
        ("https://app.example/c.json#x", "fragment"),
        ("https://user:pw@app.example/c.json", "user information"),
        ("https://app.example/a/./c.json", ". or .. segments"),
        ("https://app.example/a/../c.json", ". or .. segments"),
        ("https:///c.json", "no host"),
        ("https://app.example/" + "a" * 2100, "longer than"),
    ],
)
def test_client_id_url_rules(client_id: str, problem: str | None) -> None:
    found = client_id_problem(client_id)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_which_ids_are_documents_and_their_stored_key() -> None:
    assert is_document_client_id(URL) and is_document_client_id("HTTPS://x/y")
    assert not is_document_client_id("0b6c6a52-3f1e-4c1e-9a57-1d0c2b6f9e11")
    key = stored_id(URL)
    assert key.startswith("cimd_") and len(key) <= 64 and key == stored_id(URL) != stored_id(URL + "2")


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        (None, DEFAULT_CACHE_SECONDS),
        ("public", DEFAULT_CACHE_SECONDS),
        ("max-age=600", 600.0),
        ("public, MAX-AGE=7200", 7200.0),
        ("max-age=5", MIN_CACHE_SECONDS),
        ("max-age=99999999", MAX_CACHE_SECONDS),
        ("no-store", MIN_CACHE_SECONDS),
        ("no-cache, max-age=3600", MIN_CACHE_SECONDS),
    ],
)
def test_cache_lifetime_is_max_age_within_bounds(header: str | None, seconds: float) -> None:
    assert cache_seconds(header) == seconds


def doc(**fields: Any) -> bytes:
    return json.dumps({"client_id": URL, "redirect_uris": ["https://app.example/cb"], **fields}).encode()


def test_a_minimal_document_is_a_public_client() -> None:
    client = parse_document(URL, doc(client_name="App\u202e evil"), "application/json; charset=utf-8")
    assert client.info.client_id == URL and client.info.token_endpoint_auth_method == "none"
    assert client.redirect_uris == ("https://app.example/cb",)
    assert client.info.client_secret is None
    assert "\u202e" not in (client.info.client_name or "")  # shown on the consent screen: neutralized


@pytest.mark.parametrize(
    ("body", "ctype", "words"),
    [
        (doc(), "text/plain", "application/json"),
        (doc(), None, "application/json"),
        (b"\xff\xfe", "application/json", "not JSON"),
        (b"[1, 2]", "application/json", "not a JSON object"),
        (doc(client_id=URL + "x"), "application/json", "does not equal"),
        (doc(redirect_uris="https://app.example/cb"), "application/json", "needs redirect_uris"),
        (
            doc(redirect_uris=[f"https://app.example/{i}" for i in range(11)]),
            "application/json",
            "more than 10",
        ),
        (doc(token_endpoint_auth_method="private_key_jwt"), "application/json", '"none"'),
        (doc(client_secret="x"), "application/json", "client secret"),
    ],
)
def test_documents_breaking_a_rule(body: bytes, ctype: str | None, words: str) -> None:
    with pytest.raises(DocumentRefused) as caught:
        parse_document(URL, body, ctype)
    assert caught.value.error == "invalid_client" and words in caught.value.description
