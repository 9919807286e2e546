"""Built-in models and user models, each with tensor specs and a deterministic dataset.

    mlp, cnn, transformer   small models with seeded weights and seeded synthetic data
    digits                  scikit-learn digits classifier, trained once and cached
    import:pkg.module:factory, torchscript:PATH (.pt/.ts), export:PATH (.pt2)
"""

from __future__ import annotations

from collections.abc import Mapping

from sut.errors import ConfigError
from sut.models.base import Dataset, LoadedModel, SyntheticDataset
from sut.models.builtin import SYNTHETIC, load_synthetic
from sut.models.digits import cache_dir, load_digits_model
from sut.models.user import USER_OPTIONS, as_outputs, input_spec_option, load_user_model, user_kind

__all__ = [
    "BUILTIN_MODELS",
    "MODEL_OPTIONS",
    "Dataset",
    "LoadedModel",
    "SyntheticDataset",
    "as_outputs",
    "cache_dir",
    "check_model",
    "load_model",
]

BUILTIN_MODELS = ("cnn", "digits", "mlp", "transformer")
#: options that describe a model rather than how it is served
MODEL_OPTIONS = USER_OPTIONS


def check_model(model: str, options: Mapping[str, str]) -> None:
    """Raise ConfigError for an unknown model or model options it cannot take; loads nothing."""
    if user_kind(model) is not None:
        input_spec_option(options)
        return
    if model not in BUILTIN_MODELS:
        raise ConfigError(
            "model",
            f"unknown model {model!r}; built-ins: {', '.join(BUILTIN_MODELS)};"
            " or import:pkg.module:factory, torchscript:PATH, export:PATH",
        )
    for key in USER_OPTIONS:
        if key in options:
            raise ConfigError(key, f"only user models take it; {model!r} has fixed inputs")


def load_model(model: str, options: Mapping[str, str], seed: int) -> LoadedModel:
    """Build or load `model` on the CPU in fp32; ModelLoadError when that fails."""
    check_model(model, options)
    if model == "digits":
        return load_digits_model(seed)
    if model in SYNTHETIC:
        return load_synthetic(model, seed)
    return load_user_model(model, options, seed)
