"""`loadgen serve`: serve a built-in or user model over the Open Inference Protocol, or an
LLM over OpenAI-compatible HTTP.

    loadgen serve --model mlp,max_batch_size=16 --http-port 0 --grpc-port 0

takes the same MODEL and key=value options as `--sut builtin:MODEL,k=v`, binds
127.0.0.1 unless `--host` says otherwise, prints `serving MODEL http=H:P grpc=H:Q`
once both ports are bound (port 0 = a free one) and `ready NAME` once the model is
loaded, and exits 0 after a graceful drain on SIGTERM or SIGINT. The bearer token comes from
`--auth-token`, or unseen by `ps` from `--auth-token-env VAR` or `--auth-token-file PATH`.

    loadgen serve --model tiny-llm --http-port 8000 --max-num-seqs 16 --scheduler static

serves an LLM (tiny-llm, small-llm, causal:pkg.module:factory) over OpenAI-compatible HTTP
(`/v1/completions`, `/v1/chat/completions`, OIP `generate_stream`, `/metrics`): prints
`serving MODEL http=H:P`, then `ready MODEL`. Engine knobs come as flags (vLLM's names) or
as `--model tiny-llm,max_num_seqs=16,...`; gRPC is not served for an LLM. Should its engine
stop by itself, the server shuts down and exits 3, so a supervisor restarts it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from loadgen.adapters.base import parse_options
from loadgen.cli.exits import EXIT_ERROR, EXIT_USAGE

__all__ = ["add_parser"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the `serve` subcommand."""
    from sut.server.core import DEFAULT_MAX_BODY_BYTES, ServerConfig

    d = ServerConfig()
    p = sub.add_parser("serve", help="serve a model over HTTP and gRPC (Open Inference "
                       "Protocol), or an LLM over OpenAI-compatible HTTP",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, metavar="MODEL[,key=value...]",
                   help="as in --sut builtin:MODEL,... (mlp, cnn, transformer, digits, import:...)")
    p.add_argument("--host", default=d.host, help=f"address to bind (default {d.host})")
    p.add_argument("--http-port", type=int, default=d.http_port,
                   help=f"HTTP/REST port, 0 = any free (default {d.http_port})")
    p.add_argument("--grpc-port", type=int, default=d.grpc_port,
                   help=f"gRPC port, 0 = any free (default {d.grpc_port})")
    token = p.add_mutually_exclusive_group()
    token.add_argument("--auth-token", help="require 'Authorization: Bearer TOKEN' (not on"
                       " health); visible in `ps`: prefer --auth-token-env or --auth-token-file")
    token.add_argument("--auth-token-env", metavar="VAR",
                       help="the token is the value of environment variable VAR")
    token.add_argument("--auth-token-file", type=Path, metavar="PATH",
                       help="the token is the first line of the file PATH")
    p.add_argument("--tls-cert", type=Path, help="PEM certificate chain (with --tls-key)")
    p.add_argument("--tls-key", type=Path, help="PEM private key (with --tls-cert)")
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES,
                   help="largest request body or gRPC message (default %(default)s)")
    p.add_argument("--max-inflight", type=int, default=d.max_inflight,
                   help="infer requests held at once before 429 (default %(default)s)")
    p.add_argument("--request-timeout-s", type=float, default=None, metavar="S",
                   help="longest wait for a result before 504; 0: no bound (default: none"
                        f" for an LLM, as vLLM and SGLang; {d.request_timeout_s:g} s otherwise)")
    p.add_argument("--drain-timeout-s", type=float, default=d.drain_timeout_s,
                   help="longest wait for in-flight requests on shutdown (default %(default)s)")
    p.add_argument("--idle-timeout-s", type=float, default=d.idle_timeout_s,
                   help="close a connection silent this long, since it opened or since its"
                        " last answer (HTTP keep-alive; gRPC max idle) (default %(default)s)")
    p.add_argument("--read-timeout-s", type=float, default=d.read_timeout_s,
                   help="close an HTTP connection whose request head and body have not all"
                        " arrived this long after its first byte (slow clients); also the"
                        " gRPC handshake bound (default %(default)s)")
    p.add_argument("--max-connections", type=int, default=d.max_connections,
                   help="HTTP connections open at once; one more gets 503 and is closed"
                        " (default %(default)s)")
    p.add_argument("--max-streams", type=int, default=d.max_streams,
                   help="concurrent gRPC streams per connection (default %(default)s)")
    _add_engine_knobs(p)
    p.set_defaults(handler=_serve)


def _add_engine_knobs(p: argparse.ArgumentParser) -> None:
    """One flag per LLM engine knob, `--max-num-seqs N` for `max_num_seqs`."""
    import dataclasses

    from sut.llm.config import KNOB_HELP, EngineConfig

    group = p.add_argument_group("LLM engine (tiny-llm, small-llm, causal:...); see README")
    for field in dataclasses.fields(EngineConfig):
        flag = "--" + field.name.replace("_", "-")
        if field.type == "bool":
            group.add_argument(flag, dest=f"llm_{field.name}", default=None,
                               action=argparse.BooleanOptionalAction,
                               help=f"{KNOB_HELP[field.name]} (default {field.default})")
        else:
            group.add_argument(flag, dest=f"llm_{field.name}", default=None, metavar="V",
                               help=f"{KNOB_HELP[field.name]} (default {field.default})")


def _engine_flags(args: argparse.Namespace) -> dict[str, str]:
    """The engine knobs given as flags, as `key=value` text."""
    given = {key[4:]: value for key, value in vars(args).items()
             if key.startswith("llm_") and value is not None}
    return {key: str(value).lower() if isinstance(value, bool) else str(value)
            for key, value in given.items()}


def _serve(args: argparse.Namespace) -> int:
    from loadgen.adapters.extras import require_sut_extra

    require_sut_extra("loadgen serve")
    from sut.errors import ConfigError, SutError
    from sut.llm.names import is_llm_model
    from sut.server.app import serve_model
    from sut.server.core import ServerConfig

    model, _, rest = args.model.partition(",")
    options = parse_options(rest)
    flags = _engine_flags(args)
    if flags and not is_llm_model(model.strip()):
        print(f"loadgen serve: --{next(iter(flags)).replace('_', '-')} is an LLM engine knob;"
              f" {model.strip()!r} is not an LLM (tiny-llm, small-llm, causal:...)",
              file=sys.stderr)
        return EXIT_USAGE
    llm = is_llm_model(model.strip())
    try:
        config = ServerConfig(
            host=args.host, http_port=args.http_port, grpc_port=args.grpc_port,
            auth_token=_auth_token(args), tls_cert=args.tls_cert, tls_key=args.tls_key,
            max_body_bytes=args.max_body_bytes, max_inflight=args.max_inflight,
            request_timeout_s=_request_timeout(args.request_timeout_s, llm),
            drain_timeout_s=args.drain_timeout_s,
            idle_timeout_s=args.idle_timeout_s, read_timeout_s=args.read_timeout_s,
            max_connections=args.max_connections, max_streams=args.max_streams)
    except ValueError as exc:
        print(f"loadgen serve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if llm:
            from sut.llm.server import serve_llm

            failed = serve_llm(model.strip(), {**options, **flags}, config)
            return EXIT_ERROR if failed else 0  # the engine stopped by itself
        return serve_model(model.strip(), options, config)
    except ConfigError as exc:
        print(f"loadgen serve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (SutError, OSError) as exc:
        print(f"loadgen serve: {exc}", file=sys.stderr)
        return EXIT_ERROR


def _request_timeout(given: float | None, llm: bool) -> float | None:
    """The request bound in force: none for an LLM unless given (a long generation is the
    work a benchmark measures, not a fault), `ServerConfig`'s default otherwise; 0: none."""
    from sut.server.core import ServerConfig

    if given is None:
        return None if llm else ServerConfig().request_timeout_s
    return None if given == 0 else given


def _auth_token(args: argparse.Namespace) -> str | None:
    """The bearer token from --auth-token, --auth-token-env or --auth-token-file; ValueError
    names what is missing."""
    if args.auth_token_env is not None:
        token = os.environ.get(args.auth_token_env)
        if token is None:
            raise ValueError(f"--auth-token-env: the environment variable"
                             f" {args.auth_token_env} is not set")
        return token
    if args.auth_token_file is not None:
        try:
            lines = args.auth_token_file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--auth-token-file: cannot read {args.auth_token_file}: {exc}")\
                from None
        return lines[0].strip() if lines else ""
    given: str | None = args.auth_token
    return given
