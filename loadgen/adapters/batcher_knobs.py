"""Read and retune the batcher knobs of a remote `loadgen serve`, over its HTTP port.

    GET  BASE/v2/models/MODEL[/versions/V]/batcher   the knobs in force
    POST the same path, a JSON object knob -> value   retune live; answers the knobs in force

`spec` is an `http[s]://HOST:PORT/MODEL[?...]` SUT spec as `--sut` takes it; its
`token`, `tls`, `ca`, `insecure` and `version` options apply. The server checks the
knobs as a whole and changes nothing when one is bad; its message comes back in a
`SutError`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from loadgen.adapters.http import HTTP_KEYS, SCHEMES
from loadgen.adapters.wire.endpoint import Endpoint, tls_context
from loadgen.errors import SutError

__all__ = ["batcher_knobs"]


def batcher_knobs(spec: str, knobs: Mapping[str, Any] | None = None,
                  timeout_s: float = 10.0) -> dict[str, Any]:
    """The remote batcher's knobs in force, once `knobs` (when given) are set."""
    endpoint = Endpoint.parse(spec, SCHEMES, HTTP_KEYS)
    scheme = "https" if endpoint.tls else "http"
    version = endpoint.options.get("version")
    path = f"/v2/models/{endpoint.model}" + (f"/versions/{version}" if version else "")
    url = f"{scheme}://{endpoint.address}{path}/batcher"
    headers = {"Content-Type": "application/json"}
    if "token" in endpoint.options:
        headers["Authorization"] = f"Bearer {endpoint.options['token']}"
    body = None if knobs is None else json.dumps(dict(knobs)).encode()
    request = urllib.request.Request(url, data=body, headers=headers,
                                     method="GET" if body is None else "POST")
    context = tls_context(endpoint, endpoint.flag("insecure"))
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as answer:
            data = answer.read()
    except urllib.error.HTTPError as exc:
        raise SutError(f"{url}: {exc.code} {_message(exc)}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise SutError(f"{url}: cannot reach the server ({exc})") from None
    try:
        doc = json.loads(data)
    except ValueError:
        raise SutError(f"{url}: the answer is not JSON") from None
    if not isinstance(doc, dict):
        raise SutError(f"{url}: expected a JSON object of knobs, got {type(doc).__name__}")
    return doc


def _message(error: urllib.error.HTTPError) -> str:
    """The server's `{"error": ...}` message, or the reason phrase."""
    try:
        doc = json.loads(error.read())
    except (OSError, ValueError):
        return str(error.reason)
    return str(doc.get("error", error.reason)) if isinstance(doc, dict) else str(error.reason)
