"""The built-in LLM server: tiny causal models, an iteration-level engine over a paged KV cache,
and OpenAI-compatible and OIP `generate` endpoints.

The API lives in submodules, so that `import sut.llm` stays light (no torch):
`sut.llm.names` (which model names are LLMs), `sut.llm.model` (models and their forward
contract), `sut.llm.engine` (LLMEngine), `sut.llm.config` (EngineConfig, the knobs),
`sut.llm.server` (HTTP).
"""

__all__: list[str] = []
