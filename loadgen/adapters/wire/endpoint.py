"""Where a remote SUT lives and how to reach it: a parsed `SCHEME://HOST[:PORT]/MODEL?k=v` spec, TLS.

`Endpoint.parse` splits a spec and checks every option key against the adapter's own list
(an unknown key is a `SutSpecError` naming it); `tls_context` builds the client TLS context
an endpoint asks for.
"""

from __future__ import annotations

import ssl
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from loadgen.errors import SutSpecError, suggest

__all__ = ["Endpoint", "tls_context"]


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A parsed remote spec; `options` holds the raw strings of the keys given."""

    scheme: str
    host: str
    port: int
    model: str
    tls: bool
    options: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        """host:port, IPv6 hosts bracketed."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The endpoint without options (no token), for the result."""
        return f"{self.scheme}://{self.address}/{self.model}"

    def flag(self, key: str, default: bool = False) -> bool:
        """A 0/1 option."""
        value = self.options.get(key)
        if value is None:
            return default
        if value not in ("0", "1", "true", "false"):
            raise SutSpecError(f"{self.url}: {key}={value!r}: expected 0 or 1")
        return value in ("1", "true")

    def number(self, key: str, default: int, minimum: int = 0) -> int:
        """An integer option of at least `minimum`."""
        value = self.options.get(key)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise SutSpecError(f"{self.url}: {key}={value!r}: expected an integer") from None
        if number < minimum:
            raise SutSpecError(f"{self.url}: {key}={value!r}: must be at least {minimum}")
        return number

    @classmethod
    def parse(cls, spec: str, schemes: Mapping[str, tuple[int, bool]],
              keys: Sequence[str]) -> Endpoint:
        """Split SCHEME://HOST[:PORT]/MODEL?k=v; `schemes` maps scheme -> (default port, tls)."""
        form = f"{'|'.join(schemes)}://HOST[:PORT]/MODEL[?key=value&...]"
        parts = urllib.parse.urlsplit(spec)
        if parts.scheme not in schemes or not parts.hostname:
            raise SutSpecError(f"--sut {spec!r}: expected {form}")
        model = parts.path.strip("/")
        if not model or "/" in model:
            raise SutSpecError(f"--sut {spec!r}: expected one model name after the host ({form})")
        try:
            port = parts.port or schemes[parts.scheme][0]
            pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True,
                                           strict_parsing=bool(parts.query))
        except ValueError as exc:
            raise SutSpecError(f"--sut {spec!r}: {exc}") from None
        options = dict(pairs)
        unknown = sorted(set(options) - set(keys))
        if unknown:
            raise SutSpecError(f"--sut {spec!r}: unknown key(s) {', '.join(unknown)}"
                               f"{suggest(unknown[0], keys)}; known: {', '.join(sorted(keys))}")
        endpoint = cls(parts.scheme, parts.hostname, port, model, schemes[parts.scheme][1],
                       options)
        if endpoint.flag("tls"):
            endpoint = cls(endpoint.scheme, endpoint.host, port, model, True, options)
        return endpoint


def tls_context(endpoint: Endpoint, insecure: bool = False) -> ssl.SSLContext | None:
    """The client TLS context an endpoint asks for (`ca=FILE`, `insecure=1`), or None."""
    if not endpoint.tls:
        return None
    try:
        context = ssl.create_default_context(cafile=endpoint.options.get("ca"))
    except OSError as exc:
        raise SutSpecError(f"{endpoint.url}: ca: {exc}") from None
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
