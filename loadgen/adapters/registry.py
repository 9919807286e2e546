"""Turn a `--sut SPEC` string into an adapter.

    null                                  completes at once (harness calibration)
    sim:service=const:2ms,servers=1       queueing simulator (also exp:, lognormal:)
    llmsim:step_base=5ms,max_seqs=64,...  simulated token server (continuous batching)
    builtin:MODEL[,key=value...]          the serving harness, in process
    builtin:tiny-llm[,knob=value...]      the LLM engine, in process (adapters.llm)
    http[s]://HOST:PORT/MODEL[?k=v&...]   Open Inference Protocol over HTTP (adapters.http)
    grpc[s]://HOST:PORT/MODEL[?k=v&...]   Open Inference Protocol over gRPC (adapters.grpc)
    openai[s]://HOST:PORT/MODEL[?k=v&...] OpenAI-compatible token streams (adapters.openai)
    generate[s]://HOST:PORT/MODEL[?...]   OIP generate_stream token streams (adapters.generate)
    replicas:POLICY:SPEC;SPEC[;...]       several endpoints, spread (adapters.replicas)
"""

from __future__ import annotations

from loadgen.adapters.base import SystemUnderTest, parse_options
from loadgen.adapters.null import NullSut
from loadgen.adapters.sim import SimSut
from loadgen.errors import SutSpecError, suggest

__all__ = ["SPEC_FORMS", "make_sut"]

SPEC_FORMS = ("null | sim:service=DIST:TIME[,servers=N,...] | llmsim:[key=value,...] | "
              "builtin:MODEL[,key=value...] | "
              "http[s]://HOST:PORT/MODEL[?key=value&...] | grpc[s]://HOST:PORT/MODEL[?...] | "
              "openai[s]://HOST:PORT/MODEL[?endpoint=chat|completions&...] | "
              "generate[s]://HOST:PORT/MODEL[?...] | replicas:POLICY:SPEC;SPEC[;...]")
"""Every --sut SPEC kind, for help texts and errors."""
KINDS = ("null", "sim", "llmsim", "builtin", "http", "https", "grpc", "grpcs", "openai", "openais",
         "generate", "generates", "replicas")


def make_sut(spec: str) -> SystemUnderTest:
    """The adapter a SPEC names; raises SutSpecError with the accepted forms."""
    kind, _, rest = spec.partition(":")
    if kind == "null" and not rest:
        return NullSut()
    if kind == "sim":
        return SimSut.from_options(parse_options(rest))
    if kind == "llmsim":
        from loadgen.adapters.llmsim import LlmSimSut

        return LlmSimSut.from_options(parse_options(rest))
    if kind == "builtin":
        from loadgen.adapters.extras import require_sut_extra

        require_sut_extra(f"--sut {spec}")
        from loadgen.adapters.llm import LlmSut, is_llm_spec

        if is_llm_spec(spec):
            return LlmSut.from_spec(spec)
        from loadgen.adapters.inprocess import InProcessSut

        return InProcessSut.from_spec(spec)
    if kind in ("http", "https"):
        from loadgen.adapters.http import HttpSut

        return HttpSut.from_spec(spec)
    if kind in ("grpc", "grpcs"):
        from loadgen.adapters.grpc import GrpcSut

        return GrpcSut.from_spec(spec)
    if kind in ("openai", "openais"):
        from loadgen.adapters.openai import OpenAISut

        return OpenAISut.from_spec(spec)
    if kind in ("generate", "generates"):
        from loadgen.adapters.generate import GenerateSut

        return GenerateSut.from_spec(spec)
    if kind == "replicas":
        from loadgen.adapters.replicas import ReplicaSet

        return ReplicaSet.from_spec(rest, make_sut)
    raise SutSpecError(f"--sut {spec!r}: expected one of {SPEC_FORMS}"
                       f"{suggest(kind, KINDS)}")
