"""Open Inference Protocol (KServe v2 / Triton) servers over an `InferenceService`.

The API lives in submodules, so that `import sut.server.core` stays light:
`sut.server.app` (InferenceServer, serve, serve_model: bind, load, serve, drain),
`sut.server.core` (ServerConfig, ServerCore: what both protocols share),
`sut.server.http` (aiohttp), `sut.server.grpc` (grpc.aio) and `sut.server.errors`
(the status each error is answered with). Both servers only decode, submit and
encode, through `oipwire` and `oipwire.proto`. `loadgen serve` is the CLI.
"""

__all__: list[str] = []
