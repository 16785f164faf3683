"""MWGPConfig: every field is validated with an error that names it; dtype and device resolution."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from mogp_surprise.core.config import MWGPConfig

NAN = float("nan")
INF = float("inf")

INVALID = [
    # (field, value, exception)
    ("n_inducing", 0, ValueError),
    ("n_inducing", -1, ValueError),
    ("n_inducing", 2.5, TypeError),
    ("n_inducing", True, TypeError),
    ("n_inducing", "8", TypeError),
    ("latent_dim", 0, ValueError),
    ("latent_dim", 1.0, TypeError),
    ("n_epochs", 0, ValueError),
    ("batch_size", 0, ValueError),
    ("batch_size", None, TypeError),
    ("chunk_size", -5, ValueError),
    ("lr", 0, ValueError),
    ("lr", -1, ValueError),
    ("lr", NAN, ValueError),
    ("lr", INF, ValueError),
    ("lr", "0.1", TypeError),
    ("jitter", 0.0, ValueError),
    ("jitter", -1e-6, ValueError),
    ("embedding_reg", -0.1, ValueError),
    ("embedding_reg", NAN, ValueError),
    ("bias_reg", -1, ValueError),
    ("bias_reg", INF, ValueError),
    ("kl_weight", -1.0, ValueError),
    ("kl_weight", True, TypeError),
    ("dtype", "float16", ValueError),
    ("dtype", "half", ValueError),
    ("device", "tpu", ValueError),
    ("device", 0, ValueError),
    ("init", "svd", ValueError),
    ("lr_schedule", "step", ValueError),
    ("random_state", -1, ValueError),
    ("random_state", "a", ValueError),
    ("random_state", 1.5, ValueError),
    ("random_state", True, ValueError),
    ("use_biases", 1, TypeError),
    ("use_biases", "True", TypeError),
    ("verbose", "yes", TypeError),
    ("verbose", None, TypeError),
]


@pytest.mark.parametrize("name, value, exc", INVALID, ids=[f"{n}={v!r}" for n, v, _ in INVALID])
def test_invalid_value_raises_naming_the_parameter(name: str, value, exc: type) -> None:
    with pytest.raises(exc) as info:
        MWGPConfig(**{name: value})
    assert name in str(info.value)


@pytest.mark.parametrize("name, value, exc", INVALID[:6], ids=[f"{n}={v!r}" for n, v, _ in INVALID[:6]])
def test_replace_revalidates(name: str, value, exc: type) -> None:
    with pytest.raises(exc, match=name):
        MWGPConfig().replace(**{name: value})


VALID = [
    ("n_inducing", 1), ("n_inducing", np.int64(16)), ("lr", 1), ("lr", np.float32(0.5)),
    ("embedding_reg", 0.0), ("bias_reg", 0), ("kl_weight", 0.0), ("dtype", "float64"),
    ("device", "cpu"), ("device", "cuda"), ("device", "cuda:1"), ("device", torch.device("cpu")),
    ("init", "random"), ("lr_schedule", "constant"), ("random_state", 0), ("random_state", np.int64(7)),
    ("random_state", np.random.default_rng(0)), ("random_state", None), ("use_biases", np.bool_(False)),
    ("verbose", True),
]


# ids without memory addresses (a Generator's repr has one), so parallel runners collect the same tests
VALID_IDS = [f"{n}={type(v).__name__ if isinstance(v, np.random.Generator) else repr(v)}" for n, v in VALID]


@pytest.mark.parametrize("name, value", VALID, ids=VALID_IDS)
def test_valid_values_are_accepted(name: str, value) -> None:
    cfg = MWGPConfig(**{name: value})
    assert getattr(cfg, name) is value


def test_defaults_names_and_immutability() -> None:
    cfg = MWGPConfig()
    assert MWGPConfig.names() == tuple(f.name for f in dataclasses.fields(MWGPConfig))
    assert MWGPConfig.defaults() == {n: getattr(cfg, n) for n in MWGPConfig.names()}
    assert cfg.replace(n_inducing=4).n_inducing == 4 and cfg.n_inducing == 128
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 0.1  # type: ignore[misc]


def test_torch_dtype() -> None:
    assert MWGPConfig().torch_dtype() is torch.float32
    assert MWGPConfig(dtype="float64").torch_dtype() is torch.float64


def test_cpu_device() -> None:
    assert MWGPConfig(device="cpu").torch_device() == torch.device("cpu")
    assert MWGPConfig(device=torch.device("cpu")).torch_device() == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only fallback")
def test_auto_device_falls_back_to_cpu() -> None:
    assert MWGPConfig(device="auto").torch_device() == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:0", torch.device("cuda")], ids=str)
def test_cuda_without_cuda_raises_at_resolution(device) -> None:
    cfg = MWGPConfig(device=device)  # accepted at construction (configs are portable)
    with pytest.raises(ValueError, match="CUDA") as info:
        cfg.torch_device()
    assert "device" in str(info.value) and "cpu" in str(info.value)


def test_the_papers_model_is_the_published_one_at_every_size_and_cannot_be_changed():
    """``neighbourhood="auto"`` switched Koren's neighbourhood term into ``MWGP(**PAPER_MODEL)`` from 50,000 ratings
    (ML-100K and ML-1M) once it became the default; the paper's model has the biases and the GP alone."""
    from mogp_surprise.core.config import PAPER_MODEL

    for n, levels in ((1_000, (50, 40)), (80_000, (943, 1682)), (1_000_209, (6040, 3706))):
        cfg = MWGPConfig(**PAPER_MODEL).for_data(n, levels)
        assert (cfg.neighbourhood, cfg.implicit, cfg.mf_rank, cfg.noise) == (False, False, 0, "homoscedastic")
        assert not cfg.uses_early_stopping(n) and cfg.n_epochs == 30
    with pytest.raises(TypeError):
        PAPER_MODEL["n_epochs"] = 3  # type: ignore[index]
    assert {**PAPER_MODEL, "n_epochs": 3}["n_epochs"] == 3 and PAPER_MODEL["n_epochs"] == 30



def test_extra_terms_cannot_name_a_built_in_term_or_contradict_its_switch() -> None:
    from mogp_surprise.core import fit_mwgp

    idx, y = np.array([[0, 1], [1, 0], [2, 2], [1, 1]]), np.array([1.0, 2.0, 3.0, 4.0])
    for name in ("bilinear", "bias", "gp_input", "noise_offset"):
        with pytest.raises(ValueError, match=rf"`extra_terms` names the built-in term\(s\) \['{name}'\]"):
            fit_mwgp(idx, y, (3, 3), MWGPConfig(extra_terms=(name,), n_epochs=1, n_inducing=2, device="cpu"))
    # as before it was built in, also beside the neighbourhood=False that files of that time hold
    assert MWGPConfig(extra_terms=("neighbourhood",), neighbourhood=False).for_data(4, (3, 3)).neighbourhood


def test_a_torch_device_of_the_cpu_with_an_index_is_the_cpu() -> None:
    assert MWGPConfig(device=torch.device("cpu", 0)).torch_device() == torch.device("cpu")
