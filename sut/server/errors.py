"""Errors of the OIP servers, and the HTTP status and gRPC code each one is answered with.

    SutError                     (sut.errors)
     ├── InvalidInput            400  INVALID_ARGUMENT   also oipwire.ProtocolError
     ├── Overloaded              429  RESOURCE_EXHAUSTED the batcher queue is full
     ├── RequestTimeout          504  DEADLINE_EXCEEDED  expired in the queue, never run
     └── ServerError
          ├── NotFound           404  NOT_FOUND          unknown model, version or route
          ├── Unauthorized       401  UNAUTHENTICATED    missing or wrong bearer token
          ├── PayloadTooLarge    413  RESOURCE_EXHAUSTED body over --max-body-bytes
          ├── Busy               429  RESOURCE_EXHAUSTED more requests in flight than allowed
          ├── Unavailable        503  UNAVAILABLE        model loading, or server draining
          └── ServerTimeout      504  DEADLINE_EXCEEDED  no result within the request timeout

Any other `SutError` (a batch whose inference raised) is 500 / INTERNAL.
"""

from __future__ import annotations

from dataclasses import dataclass

from oipwire.errors import ProtocolError
from sut.errors import InvalidInput, Overloaded, RequestTimeout, SutError

__all__ = [
    "Answer",
    "Busy",
    "NotFound",
    "PayloadTooLarge",
    "ServerError",
    "ServerTimeout",
    "Unauthorized",
    "Unavailable",
    "answer_for",
]


class ServerError(SutError):
    """Base of the errors the servers raise themselves."""


class NotFound(ServerError):
    """No such model, version or route."""


class Unauthorized(ServerError):
    """The bearer token is missing or wrong."""


class PayloadTooLarge(ServerError):
    """The request body is over the configured bound."""


class Busy(ServerError):
    """The server already holds its maximum of requests in flight."""


class Unavailable(ServerError):
    """The model is not loaded yet, or the server is draining."""


class ServerTimeout(ServerError):
    """The service gave no result within the server's request timeout."""


@dataclass(frozen=True, slots=True)
class Answer:
    """How an error is answered: HTTP status, gRPC status name (`grpc.StatusCode[name]`),
    metrics outcome ("" where the service counts the request itself), message."""

    http_status: int
    grpc_code: str
    outcome: str
    message: str


_TABLE: tuple[tuple[type[Exception], int, str, str], ...] = (
    (ProtocolError, 400, "INVALID_ARGUMENT", "invalid"),
    (InvalidInput, 400, "INVALID_ARGUMENT", "invalid"),
    (NotFound, 404, "NOT_FOUND", "invalid"),
    (Unauthorized, 401, "UNAUTHENTICATED", "unauthorized"),
    (PayloadTooLarge, 413, "RESOURCE_EXHAUSTED", "invalid"),
    (Overloaded, 429, "RESOURCE_EXHAUSTED", ""),
    (Busy, 429, "RESOURCE_EXHAUSTED", "rejected"),
    (Unavailable, 503, "UNAVAILABLE", "unavailable"),
    (RequestTimeout, 504, "DEADLINE_EXCEEDED", ""),
    (ServerTimeout, 504, "DEADLINE_EXCEEDED", "timeout"),
)


def answer_for(exc: BaseException) -> Answer:
    """The answer to an exception; anything unexpected is a 500 with a generic message."""
    for kind, status, code, outcome in _TABLE:
        if isinstance(exc, kind):
            return Answer(status, code, outcome, str(exc))
    if isinstance(exc, SutError):
        return Answer(500, "INTERNAL", "", str(exc))
    return Answer(500, "INTERNAL", "failed",
                  f"internal server error ({type(exc).__name__})")
