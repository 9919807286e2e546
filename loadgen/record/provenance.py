"""What an HTTP endpoint says of itself, and its baseline round trip, read before the run.

`probe_endpoint(base)` asks `GET /v1/models` (OpenAI: the model ids and `max_model_len`),
`GET /version` (vLLM, TGI's `/info`), `GET /v2` (OIP server metadata: name, version,
extensions) and keeps the few fields that identify the server (`identity`), with a GPU model
and count where the server names them. Then it times `rounds` GETs of a health route (the
first of `/health`, `/v2/health/live`, `/v1/models` that answers at all) on a fresh
connection each: the network round trip plus a trivial handler, so a distant endpoint can be
told apart from a slow one. Every answer is untrusted: bodies are capped, parsed as JSON
only, and only short strings and numbers are kept. Nothing here raises; a route that does
not answer is left out.
"""

from __future__ import annotations

import json
import statistics
import time
import urllib.error
import urllib.request
from typing import Any

__all__ = ["IDENTITY_ROUTES", "probe_endpoint"]

IDENTITY_ROUTES = ("/v1/models", "/version", "/info", "/v2")
HEALTH_ROUTES = ("/health", "/v2/health/live", "/v1/models")
_MAX_BODY = 256 * 1024
_MAX_TEXT = 200
_GPU_KEYS = ("gpu", "gpu_model", "gpu_name", "device_name")
_GPU_COUNT_KEYS = ("gpu_count", "num_gpus", "num_shard", "tensor_parallel_size")


def _get(url: str, timeout_s: float, headers: dict[str, str]) -> tuple[int, bytes]:
    """(status, body) of a GET; status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=timeout_s) as response:
            return int(response.status), bytes(response.read(_MAX_BODY))
    except urllib.error.HTTPError as exc:
        return int(exc.code), b""
    except (OSError, ValueError):
        return 0, b""


def _short(value: Any) -> Any:
    """Numbers, booleans and short strings kept; anything else dropped (None)."""
    if isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return value[:_MAX_TEXT]
    return None


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None


def _identity(route: str, doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict):
        return {}
    if route == "/v1/models":
        data = doc.get("data")
        models = [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []
        return {"models": [_short(m.get("id")) for m in models[:16]],
                "max_model_len": _short(models[0].get("max_model_len")) if models else None}
    kept = {k: _short(v) for k, v in doc.items() if _short(v) is not None}
    if route == "/v2":
        exts = doc.get("extensions")
        kept["extensions"] = [_short(e) for e in exts[:32]] if isinstance(exts, list) else []
    return {route.strip("/"): dict(sorted(kept.items())[:32])}


def _gpu(identity: dict[str, Any]) -> dict[str, Any] | None:
    for part in identity.values():
        if not isinstance(part, dict):
            continue
        model = next((part[k] for k in _GPU_KEYS if isinstance(part.get(k), str)), None)
        count = next((part[k] for k in _GPU_COUNT_KEYS if isinstance(part.get(k), int)), None)
        if model is not None or count is not None:
            return {"model": model, "count": count}
    return None


def _health_route(base: str, timeout_s: float,
                  headers: dict[str, str]) -> tuple[str, int] | None:
    """The first health route answering 2xx, else the first answering at all."""
    answered = [(route, _get(base + route, timeout_s, headers)[0]) for route in HEALTH_ROUTES]
    ok = [(r, s) for r, s in answered if 200 <= s < 300]
    return next(iter(ok or [(r, s) for r, s in answered if s]), None)


def _round_trips(base: str, rounds: int, timeout_s: float,
                 headers: dict[str, str]) -> dict[str, Any] | None:
    found = _health_route(base, timeout_s, headers)
    if found is None:
        return None
    route, status = found
    times = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        _get(base + route, timeout_s, headers)
        times.append(time.perf_counter_ns() - start)
    return {"route": route, "status": status, "count": len(times), "min_ns": min(times),
            "median_ns": round(statistics.median(times)), "max_ns": max(times)}


def probe_endpoint(base: str, rounds: int = 5, timeout_s: float = 2.0,
                   headers: dict[str, str] | None = None) -> dict[str, Any]:
    """result.json `endpoint`: `base`, `identity` (what it says of itself), `gpu` (model and
    count where exposed, else None) and `baseline_rtt` (None when no route answered);
    `headers` (the SUT's own bearer token) go with every request."""
    sent = dict(headers or {})
    identity: dict[str, Any] = {}
    for route in IDENTITY_ROUTES:
        status, body = _get(base + route, timeout_s, sent)
        if 200 <= status < 300:
            identity |= _identity(route, _json(body))
    return {"base": base, "identity": identity, "gpu": _gpu(identity),
            "baseline_rtt": _round_trips(base, rounds, timeout_s, sent)}
