"""The error a request body the server cannot use raises; plain, so the wire formats import no web framework."""

from __future__ import annotations


class BadRequest(ValueError):
    """A request body the server cannot use, naming the field (answered 400, never 500)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)
