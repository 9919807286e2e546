"""The server timings: the one vocabulary a server reports and a client records.

An inference response carries, in its `parameters`, how long the request spent in each
phase on the server, as int nanoseconds (durations, never clock times), under the name
`<component>_ns`; and the size of the batch it ran in under `batch_size`:

    component        parameter           the span
    queue            queue_ns            enqueued -> taken into a forming batch
    batch_formation  batch_formation_ns  taken -> the batch dispatched to a worker
    h2d              h2d_ns              staging and host-to-device copy of the batch's inputs
    compute          compute_ns          model execution of the batch
    d2h              d2h_ns              device-to-host copy of the outputs
    postprocess      postprocess_ns      end of d2h -> this request's result ready
    server_total     server_total_ns     the server's whole hold of the request: request
                                         received -> response about to be encoded (in
                                         process: enqueued -> result ready)
    batch_size       batch_size          samples in the batch it ran in (a count)

The phases may overlap or leave gaps between them (hand-offs), so they need not add up to
`server_total`. A server sends every component it measured (`timing_parameters`); loadgen
records each under its component name (`components`, or `PARAMETER_COMPONENTS` for a
client that scans the wire itself), in process and over HTTP or gRPC alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = [
    "BATCH_FORMATION", "BATCH_FORMATION_NS", "BATCH_SIZE", "COMPONENTS", "COMPUTE", "COMPUTE_NS",
    "D2H", "D2H_NS", "H2D", "H2D_NS", "PARAMETER_COMPONENTS", "POSTPROCESS", "POSTPROCESS_NS",
    "QUEUE", "QUEUE_NS", "SERVER_TOTAL", "SERVER_TOTAL_NS", "TIMING_PARAMETERS", "components",
    "parameter_name", "timing_parameters",
]

QUEUE = "queue"
BATCH_FORMATION = "batch_formation"
H2D = "h2d"
COMPUTE = "compute"
D2H = "d2h"
POSTPROCESS = "postprocess"
SERVER_TOTAL = "server_total"
COMPONENTS = (QUEUE, BATCH_FORMATION, H2D, COMPUTE, D2H, POSTPROCESS, SERVER_TOTAL)
"""The durations a server reports, in the order of a request's path."""
BATCH_SIZE = "batch_size"
"""The batch the request ran in: a count, under the same name as component and parameter."""


def parameter_name(component: str) -> str:
    """The response parameter of a duration component: `<component>_ns`."""
    return f"{component}_ns"


QUEUE_NS = parameter_name(QUEUE)
BATCH_FORMATION_NS = parameter_name(BATCH_FORMATION)
H2D_NS = parameter_name(H2D)
COMPUTE_NS = parameter_name(COMPUTE)
D2H_NS = parameter_name(D2H)
POSTPROCESS_NS = parameter_name(POSTPROCESS)
SERVER_TOTAL_NS = parameter_name(SERVER_TOTAL)
PARAMETER_COMPONENTS: Mapping[str, str] = MappingProxyType(
    {**{parameter_name(c): c for c in COMPONENTS}, BATCH_SIZE: BATCH_SIZE})
"""Response parameter -> component name, for every timing parameter."""
TIMING_PARAMETERS = tuple(PARAMETER_COMPONENTS)
"""Every timing parameter a server may report (int parameters)."""

_KNOWN = frozenset(COMPONENTS)


def timing_parameters(timings_ns: Mapping[str, int], batch_size: int) -> dict[str, int]:
    """A response's timing parameters from {component: ns} and the batch size.

    A component outside `COMPONENTS` is a ValueError: add it to the vocabulary first, so
    that clients learn it at the same time.
    """
    unknown = timings_ns.keys() - _KNOWN
    if unknown:
        raise ValueError(f"timing components {sorted(unknown)} are not in oipwire.timing")
    params = {parameter_name(c): int(ns) for c, ns in timings_ns.items()}
    params[BATCH_SIZE] = int(batch_size)
    return params


def components(parameters: Mapping[str, object]) -> dict[str, int]:
    """{component: value} of the timing parameters among a response's parameters."""
    return {PARAMETER_COMPONENTS[key]: value for key, value in parameters.items()
            if key in PARAMETER_COMPONENTS and type(value) is int}
