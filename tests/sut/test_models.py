"""Built-in models, the digits cache, and user models (import path, TorchScript, .pt2)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from oipwire.datatypes import TensorSpec
from sut.errors import ConfigError, InvalidInput, ModelLoadError
from sut.models import BUILTIN_MODELS, cache_dir, load_model
from sut.models import digits as digits_module


def _forward(name: str, options: dict[str, str] | None = None, rows: int = 3) -> np.ndarray:
    loaded = load_model(name, options or {}, 0)
    sample = loaded.dataset.sample_inputs(np.arange(rows))
    with torch.inference_mode():
        return loaded.module(*(torch.from_numpy(a) for a in sample.values())).numpy()


def test_digits_accuracy_on_held_out_images() -> None:
    loaded = load_model("digits", {}, 0)
    indices = np.arange(loaded.dataset.size)
    with torch.inference_mode():
        logits = loaded.module(torch.from_numpy(loaded.dataset.sample_inputs(indices)["input"]))
    accuracy = float((logits.argmax(dim=1).numpy() == loaded.dataset.labels(indices)).mean())
    assert loaded.dataset.size == 540  # the 30 % held out
    assert accuracy >= 0.95
    assert loaded.info["held_out_accuracy"] == pytest.approx(accuracy)


def test_digits_weights_come_from_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    first = load_model("digits", {}, 0)
    assert Path(first.info["weights"]).parent == cache_dir()
    monkeypatch.setattr(digits_module, "train_digits", lambda seed: pytest.fail("retrained"))
    again = load_model("digits", {}, 0)
    for a, b in zip(first.module.state_dict().values(), again.module.state_dict().values(),
                    strict=True):
        assert torch.equal(a, b)


def test_unreadable_digits_cache_is_retrained(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOADGEN_CACHE_DIR", str(tmp_path))
    path = digits_module._cache_file(5)
    assert path.parent == tmp_path
    path.write_bytes(b"not a checkpoint")
    loaded = load_model("digits", {}, 5)
    assert loaded.info["held_out_accuracy"] >= 0.95
    blob = torch.load(path, weights_only=True)
    assert set(blob) == {"state", "accuracy"}


def test_cache_dir_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("LOADGEN_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "loadgen"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "loadgen"
    monkeypatch.setenv("LOADGEN_CACHE_DIR", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x"


@pytest.mark.parametrize("name", BUILTIN_MODELS)
def test_builtins_match_their_specs_and_are_seeded(name: str) -> None:
    loaded = load_model(name, {}, 0)
    sample = loaded.dataset.sample_inputs(np.arange(3))
    for spec in loaded.inputs:
        assert sample[spec.name].shape[1:] == spec.shape[1:]
        assert sample[spec.name].dtype == {"FP32": np.float32, "INT64": np.int64}[spec.datatype]
    out = _forward(name)
    assert out.shape == (3, 10) and loaded.outputs == (TensorSpec("output", "FP32", (-1, 10)),)
    np.testing.assert_array_equal(out, _forward(name))  # same seed, same weights and data
    other = load_model(name, {}, 1).dataset.sample_inputs(np.arange(3))
    assert any(not np.array_equal(sample[k], other[k]) for k in sample)


def test_dataset_refuses_indices_out_of_range() -> None:
    dataset = load_model("mlp", {}, 0).dataset
    with pytest.raises(InvalidInput):
        dataset.sample_inputs(np.array([dataset.size]))
    assert dataset.labels(np.array([0])) is None


def test_user_model_by_import_path() -> None:
    loaded = load_model("import:tests.sut.user_models:echo", {}, 0)
    assert (loaded.name, loaded.platform) == ("echo", "pytorch")
    assert loaded.inputs == (TensorSpec("x", "FP32", (-1, 4)),)
    assert loaded.outputs == (TensorSpec("output", "FP32", (-1, 4)),)


def test_user_model_outputs_found_by_name() -> None:
    options = {"input_shape": "5", "input_name": "values"}
    loaded = load_model("import:tests.sut.user_models:two_heads", options, 0)
    assert loaded.inputs == (TensorSpec("values", "FP32", (-1, 5)),)
    assert [(s.name, s.shape) for s in loaded.outputs] == [("total", (-1,)), ("biggest", (-1,))]


@pytest.mark.parametrize("model, options, error", [
    ("import:tests.sut.user_models:not_a_module", {"input_shape": "4"}, ModelLoadError),
    ("import:tests.sut.user_models:bytes_input", {}, ModelLoadError),  # no torch dtype
    ("import:tests.sut.user_models:bad_shape", {}, ModelLoadError),
    ("import:tests.sut.no_such_module:f", {"input_shape": "4"}, ModelLoadError),
    ("import:tests.sut.user_models", {"input_shape": "4"}, ModelLoadError),
    ("import:tests.sut.user_models:two_heads", {}, ConfigError),
    ("import:tests.sut.user_models:two_heads", {"input_shape": "4x-1"}, ConfigError),
    ("import:tests.sut.user_models:two_heads", {"input_shape": "4", "input_dtype": "X"},
     ConfigError),
    ("mlp", {"input_shape": "4"}, ConfigError),
    ("resnet", {}, ConfigError),
    ("torchscript:/no/such/file.pt", {"input_shape": "4"}, ModelLoadError),
])
def test_bad_models_are_refused(model: str, options: dict[str, str],
                                error: type[Exception]) -> None:
    with pytest.raises(error):
        load_model(model, options, 0)


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).eval()


@pytest.mark.parametrize("prefix, suffix", [("torchscript:", ".pt"), ("", ".ts")])
def test_torchscript_file(tmp_path: Path, prefix: str, suffix: str) -> None:
    net = _net()
    path = tmp_path / f"net{suffix}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.trace(net, torch.zeros(2, 6)).save(str(path))
    loaded = load_model(f"{prefix}{path}", {"input_shape": "6"}, 0)
    assert (loaded.name, loaded.platform) == ("net", "pytorch_libtorch")
    assert loaded.outputs == (TensorSpec("output", "FP32", (-1, 3)),)
    x = loaded.dataset.sample_inputs(np.arange(5))["input"]
    with torch.inference_mode():
        np.testing.assert_allclose(loaded.module(torch.from_numpy(x)).numpy(),
                                   net(torch.from_numpy(x)).numpy(), rtol=1e-6)


def test_exported_program_file(tmp_path: Path) -> None:
    net = _net()
    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(net, (torch.zeros(2, 6),), dynamic_shapes=({0: batch},))
    path = tmp_path / "net.pt2"
    torch.export.save(program, str(path))
    loaded = load_model(str(path), {}, 0)
    assert (loaded.name, loaded.platform) == ("net", "pytorch_export")
    assert [(s.datatype, s.shape) for s in loaded.inputs] == [("FP32", (-1, 6))]
    x = loaded.dataset.sample_inputs(np.arange(5))[loaded.inputs[0].name]
    with torch.inference_mode():
        np.testing.assert_allclose(loaded.module(torch.from_numpy(x)).numpy(),
                                   net(torch.from_numpy(x)).numpy(), rtol=1e-6)
