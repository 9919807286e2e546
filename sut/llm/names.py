"""Which `--model` / `builtin:` names are causal LMs served by the LLM engine (no torch here).

    tiny-llm                      2 layers, width 128, byte vocabulary (CPU in CI)
    small-llm                     4 layers, width 512
    causal:pkg.module:factory     a user model: factory() -> nn.Module (see sut.llm.model)
"""

from __future__ import annotations

__all__ = ["CAUSAL_PREFIX", "LLM_MODELS", "is_llm_model"]

LLM_MODELS = ("small-llm", "tiny-llm")
CAUSAL_PREFIX = "causal:"


def is_llm_model(model: str) -> bool:
    """True for a built-in LLM name or a `causal:` user model."""
    return model in LLM_MODELS or model.startswith(CAUSAL_PREFIX)
