"""Web UI exceptions. Views raise them; :mod:`switchboard.web.page` turns each into one page.

``NotFound`` is also the answer to "this belongs to someone else": a human cannot tell another
human's endpoint from one that does not exist.
"""

from __future__ import annotations


class WebError(Exception):
    status = 400
    title = "Something went wrong"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(WebError):
    status = 404
    title = "Not found"

    def __init__(self, message: str = "There is nothing here, or it is not yours to see.") -> None:
        super().__init__(message)


class BadRequest(WebError):
    status = 400
    title = "That did not work"


class CsrfRejected(WebError):
    status = 403
    title = "This form has expired"

    def __init__(self) -> None:
        super().__init__(
            "The form was not sent from this page, or it is too old. Go back, reload the page and try again."
        )


class TooLarge(WebError):
    status = 413
    title = "Too much data"

    def __init__(self) -> None:
        super().__init__("That form was larger than this server accepts.")
