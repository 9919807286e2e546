"""The HTTP root of a remote SUT (`http[s]://HOST:PORT`), where its `/metrics`, `/version`
and health routes live; None for a SUT that is not reached over HTTP (in process, gRPC,
simulated, several replicas).

Takes an adapter (its `endpoint`) or a `--sut` SPEC string, so the driver of a run over
several load workers finds it without building an adapter.
"""

from __future__ import annotations

import urllib.parse

from loadgen.adapters.wire.endpoint import Endpoint

__all__ = ["HTTP_SCHEMES", "http_base"]

HTTP_SCHEMES = {"http": (80, False), "https": (443, True), "openai": (80, False),
                "openais": (443, True), "generate": (80, False), "generates": (443, True)}
"""The `--sut` schemes spoken over HTTP: (default port, TLS)."""


def _root(host: str, port: int, tls: bool) -> str:
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return f"{'https' if tls else 'http'}://{address}"


def http_base(sut: object) -> str | None:
    """`http[s]://HOST:PORT` of an HTTP SUT (adapter or SPEC string); None otherwise."""
    if isinstance(sut, str):
        parts = urllib.parse.urlsplit(sut)
        if parts.scheme not in HTTP_SCHEMES or not parts.hostname:
            return None
        default, tls = HTTP_SCHEMES[parts.scheme]
        try:
            port = parts.port or default
        except ValueError:
            return None
        return _root(parts.hostname, port, tls)
    endpoint = getattr(sut, "endpoint", None)
    if isinstance(endpoint, Endpoint) and endpoint.scheme in HTTP_SCHEMES:
        return _root(endpoint.host, endpoint.port, endpoint.tls)
    return None
