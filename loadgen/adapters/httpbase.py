"""The HTTP root of a remote SUT (`http[s]://HOST:PORT`), where its `/metrics`, `/version`
and health routes live; None for a SUT that is not reached over HTTP (in process, gRPC,
simulated, several replicas).

Takes an adapter (its `endpoint`) or a `--sut` SPEC string, so the driver of a run over
several load workers finds it without building an adapter. `http_auth` gives the bearer
header the SUT's requests carry, so a protected `/metrics` of the same server can be read.
"""

from __future__ import annotations

import os
import urllib.parse

from loadgen.adapters.wire.endpoint import Endpoint

__all__ = ["HTTP_SCHEMES", "http_auth", "http_base"]

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


def http_auth(sut: object) -> dict[str, str]:
    """The `Authorization` header the SUT's own requests carry (`api_key_env`), for the same
    endpoint's other routes; empty when it sends none. Never for another host."""
    if isinstance(sut, str):
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(sut).query)
        variable = (query.get("api_key_env") or [""])[0]
        key = os.environ.get(variable, "") if variable else ""
        return {"Authorization": f"Bearer {key}"} if key else {}
    headers = getattr(sut, "headers", None)
    token = headers.get("Authorization") if isinstance(headers, dict) else None
    return {"Authorization": token} if isinstance(token, str) else {}
