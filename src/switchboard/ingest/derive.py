"""Turn a parsed webhook payload into the few fields a todo needs.

Payloads come from senders we do not control, so every field is read
defensively: a missing or wrongly typed value drops out of the title instead
of raising. The title stays the sender's raw text (the doorbell neutralizes
it, SPEC-0011); here it is only made storable and capped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from switchboard.core.text import neutralize, storable, truncate
from switchboard.ingest.verify import check_kind, header_value

__all__ = ["MAX_KIND", "MAX_TITLE", "DerivedEvent", "derive", "valid_kind"]

MAX_TITLE = 500
MAX_KIND = 100
_MAX_ACTOR = 200
_MAX_URL = 2048
# Issue and PR numbers beyond this are not real; the cap also keeps int-to-str
# conversion of a huge JSON number from raising.
_MAX_NUMBER = 10**15
_KIND = re.compile(r"[A-Za-z0-9_.:-]+", re.ASCII)
_TITLE_FIELDS = ("title", "summary", "subject")

_EVENT_HEADERS = {"gitea": "X-Gitea-Event", "github": "X-GitHub-Event"}


@dataclass(frozen=True)
class DerivedEvent:
    """What a delivery is about: routing kind, human title, and a few facts.

    `kind` is what routes match on (None when the sender gave no usable
    event type); `title` is raw sender text, never empty, at most 500
    characters; `url` is only ever an http(s) link.
    """

    kind: str | None
    title: str
    action: str | None
    actor: str | None
    url: str | None


def valid_kind(value: object) -> str | None:
    """`value` if it is a usable event kind or action token, else None."""
    if isinstance(value, str) and len(value) <= MAX_KIND and _KIND.fullmatch(value):
        return value
    return None


def _at(obj: object, *path: str) -> object:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _text(obj: object, *path: str) -> str | None:
    value = _at(obj, *path)
    if isinstance(value, str) and value.strip():
        return value
    return None


def _number(obj: object, *path: str) -> int | None:
    value = _at(obj, *path)
    # bool is an int subclass; `true` is not an issue number.
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _MAX_NUMBER:
        return value
    return None


def _login(user: object) -> str | None:
    """A forge user's name: GitHub has `login`, Gitea `login` and `username`."""
    for field in ("login", "username", "name"):
        name = _text(user, field)
        if name is not None:
            return name
    return None


def _actor(name: str | None) -> str | None:
    # An actor is an identifier, not prose: keep it one clean line.
    if name is None:
        return None
    clean = neutralize(name)
    return clean if 0 < len(clean) <= _MAX_ACTOR else None


def _url(value: object) -> str | None:
    """`value` if it is an absolute http(s) URL; a sender's `javascript:` stays out."""
    if not isinstance(value, str) or len(value) > _MAX_URL:
        return None
    if any(ch.isspace() or not ch.isprintable() for ch in value):
        return None
    try:
        parts = urlsplit(value)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    return value


def _first_url(payload: object, *paths: tuple[str, ...]) -> str | None:
    for path in paths:
        url = _url(_at(payload, *path))
        if url is not None:
            return url
    return None


def _compose(head: str, repo: str | None, by: str | None = None, tail: str | None = None) -> str:
    title = head
    if repo:
        title += f" in {repo}"
    if by:
        title += f" by {by}"
    if tail:
        title += f": {tail}"
    return title


def _numbered(label: str, number: int | None, verb: str | None) -> str:
    head = label
    if number is not None:
        head += f" #{number}"
    if verb:
        head += f" {verb}"
    return head


@dataclass(frozen=True)
class _Forge:
    payload: object
    repo: str | None
    action: str | None
    sender: str | None


def _pull_request(f: _Forge) -> str:
    pr = _at(f.payload, "pull_request")
    number = _number(pr, "number")
    if number is None:
        number = _number(f.payload, "number")
    verb = f.action
    # Both forges report a merge as action "closed" with merged = true.
    if verb == "closed" and _at(pr, "merged") is True:
        verb = "merged"
    return _compose(_numbered("PR", number, verb), f.repo, tail=_text(pr, "title"))


def _issues(f: _Forge) -> str:
    issue = _at(f.payload, "issue")
    number = _number(issue, "number")
    if number is None:
        number = _number(f.payload, "number")
    return _compose(_numbered("Issue", number, f.action), f.repo, tail=_text(issue, "title"))


def _issue_comment(f: _Forge) -> str:
    issue = _at(f.payload, "issue")
    number = _number(issue, "number")
    head = "Comment" if number is None else f"Comment on #{number}"
    author = _login(_at(f.payload, "comment", "user")) or f.sender
    return _compose(head, f.repo, by=author, tail=_text(issue, "title"))


def _ref_name(ref: str | None) -> str | None:
    if ref is None:
        return None
    if ref.startswith("refs/heads/"):
        return ref.removeprefix("refs/heads/") or None
    if ref.startswith("refs/tags/"):
        tag = ref.removeprefix("refs/tags/")
        return f"tag {tag}" if tag else None
    return ref


def _push(f: _Forge) -> str:
    ref = _ref_name(_text(f.payload, "ref"))
    head = "Push" if ref is None else f"Push to {ref}"
    pusher = _login(_at(f.payload, "pusher")) or f.sender
    if _at(f.payload, "deleted") is True:
        what: str | None = "deleted"
    else:
        # Gitea caps the `commits` list and reports the real count separately.
        count = _number(f.payload, "total_commits")
        commits = _at(f.payload, "commits")
        if count is None and isinstance(commits, list):
            count = len(commits)
        what = None if count is None else f"{count} commit{'' if count == 1 else 's'}"
    if what is None:
        return _compose(head, f.repo, by=pusher)
    if pusher:
        what += f" by {pusher}"
    return _compose(head, f.repo, tail=what)


def _ping(f: _Forge) -> str:
    return _compose("Webhook ping", f.repo)


_FORGE_TITLES: dict[str, Callable[[_Forge], str]] = {
    "pull_request": _pull_request,
    "issues": _issues,
    "issue_comment": _issue_comment,
    "push": _push,
    "ping": _ping,
}

_FORGE_URLS: dict[str, tuple[tuple[str, ...], ...]] = {
    "pull_request": (("pull_request", "html_url"),),
    "issues": (("issue", "html_url"),),
    "issue_comment": (("comment", "html_url"), ("issue", "html_url")),
    "push": (("compare",), ("compare_url",)),
}


def _plain_title(payload: object) -> str | None:
    """A sender-provided title, at the top level or under `data` (Standard Webhooks style)."""
    for where in (payload, _at(payload, "data")):
        for field in _TITLE_FIELDS:
            title = _text(where, field)
            if title is not None:
                return title
    return None


def _derive_forge(source_kind: str, headers: Mapping[str, str], payload: object) -> DerivedEvent:
    event = valid_kind(header_value(headers, _EVENT_HEADERS[source_kind]))
    sender = _login(_at(payload, "sender"))
    forge = _Forge(
        payload=payload,
        repo=_text(payload, "repository", "full_name"),
        action=valid_kind(_at(payload, "action")),
        sender=sender,
    )
    builder = _FORGE_TITLES.get(event) if event is not None else None
    if builder is not None:
        title = builder(forge)
    elif event is not None:
        title = _compose(event, forge.repo)
    else:
        title = _plain_title(payload) or _compose("webhook event", forge.repo)
    url_paths = _FORGE_URLS.get(event, ()) if event is not None else ()
    url = _first_url(payload, *url_paths, ("repository", "html_url"))
    actor = sender or _login(_at(payload, "pusher"))
    return DerivedEvent(event, title, forge.action, _actor(actor), url)


def _derive_plain(source_kind: str, headers: Mapping[str, str], payload: object) -> DerivedEvent:
    candidates: list[object] = [_at(payload, "type")]
    if source_kind == "generic":
        candidates = [header_value(headers, "X-Event-Type"), *candidates, _at(payload, "event")]
    kind = next((k for k in map(valid_kind, candidates) if k is not None), None)
    title = _plain_title(payload) or (f"{kind} event" if kind else "webhook event")
    return DerivedEvent(kind, title, valid_kind(_at(payload, "action")), None, None)


def derive(source_kind: str, headers: Mapping[str, str], payload: object) -> DerivedEvent:
    """Derive kind, title, action, actor and link from one delivery.

    `payload` is whatever ``json.loads`` returned (any JSON value). Never
    raises on sender input; an unknown `source_kind` raises ValueError.
    """
    if check_kind(source_kind) in _EVENT_HEADERS:
        event = _derive_forge(source_kind, headers, payload)
    else:
        event = _derive_plain(source_kind, headers, payload)
    title = truncate(storable(event.title), MAX_TITLE)
    return DerivedEvent(event.kind, title or "webhook event", event.action, event.actor, event.url)
