"""The serving harness: a dynamic batcher feeding torch models on GPU (or CPU) workers.

The API lives in submodules, so that `import sut.errors` stays light:
`sut.service` (InferenceService, build_service), `sut.batcher`, `sut.workers`,
`sut.models`, `sut.errors`, and `sut.server` for HTTP/gRPC.
"""

__all__: list[str] = []
