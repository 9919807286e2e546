"""The one error of the wire protocol.

    ValueError
     └── ProtocolError    a message, tensor or metadata entry that breaks the protocol;
                          a server answers it with HTTP 400 / gRPC INVALID_ARGUMENT

Every function of `oipwire` that is handed a malformed input raises `ProtocolError`, with a
text naming the tensor (or parameter, or field) and the problem; never another exception.
"""

from __future__ import annotations

__all__ = ["ProtocolError"]


class ProtocolError(ValueError):
    """A message that breaks the protocol; the text says which tensor and why."""
