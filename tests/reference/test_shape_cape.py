"""SHAPE and CAPE against their public code (butsugiri/shape ``PositionalEncoding``; gcambara/cape
``CAPE1d``, ``CAPE2d``), through outputs of that code on fixed inputs and draws (tests/reference/data,
written by tests/reference/make_fixtures.py). Where posenc follows the paper instead, the test pins the
difference (docs/positions.md, "Deviations from public implementations"): the reference's output is
posenc's with the documented change and only with it."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from posenc.positions import cape as cape_module
from posenc.positions import cape2d as cape2d_module
from posenc.positions.cape import CapeAugmentation, CapeParams
from posenc.positions.cape2d import Cape2dParams, CapeAugmentation2d
from posenc.positions.grid2d import cape_frequencies, patch_centres, sinusoidal_2d
from posenc.positions.shape import ShapeAugmentation, ShapeParams
from posenc.positions.sinusoidal import SinusoidalParams, SinusoidalPosition, sinusoidal_embedding
from posenc.positions.sinusoidal2d import Sinusoidal2dParams, SinusoidalPosition2d
from tests.reference.fixtures import fixture, tensor

#: The references compute their sinusoids in float32 (positions up to ~500·θ); posenc in float64.
ATOL = 2e-5


def close(actual: torch.Tensor, expected: torch.Tensor, atol: float = ATOL) -> None:
    torch.testing.assert_close(actual.double(), expected.double(), rtol=0, atol=atol)


def far(actual: torch.Tensor, expected: torch.Tensor, at_least: float) -> None:
    """The two differ somewhere by more than ``at_least`` (a documented deviation is really there)."""
    assert (actual.double() - expected.double()).abs().max() > at_least


# --- SHAPE ---------------------------------------------------------------------------------------


def shape_case(mode: str) -> list[dict[str, Any]]:
    return [c for c in fixture("shape")["cases"] if c["mode"] == mode]


def shape_embedding(aug: ShapeAugmentation, length: int, batch: int, positions: torch.Tensor | None = None) -> torch.Tensor:
    """PE of SHAPE's positions (zero embeddings, so the position term alone): ``(B, L, D)``."""
    dim = fixture("shape")["dim"]
    mask = torch.ones(batch, length, dtype=torch.bool)
    pos = torch.arange(length, dtype=torch.float32).expand(batch, length) if positions is None else positions
    return SinusoidalPosition(dim, SinusoidalParams())(torch.zeros(batch, length, dim), aug(pos, mask), mask)


def public_shape() -> ShapeAugmentation:
    """SHAPE as the public code runs it: k from {0..K−1} in training, K added at inference."""
    k = fixture("shape")["pe_noise_size"]
    return ShapeAugmentation(ShapeParams(max_shift=k, exclusive_max=True, inference_offset=k))


@pytest.mark.parametrize("case", shape_case("train"), ids=lambda c: f"offsets{c['offsets']}")
def test_shape_public_variant_equals_positional_encoding_in_training(case: dict[str, Any], monkeypatch) -> None:
    data = fixture("shape")
    aug = public_shape().train()
    offsets = torch.tensor(case["offsets"])
    monkeypatch.setattr(aug, "sample_offsets", lambda batch, sides, like: offsets[:, None].to(like.dtype))
    close(shape_embedding(aug, data["length"], data["batch"]), tensor(case["output"]))


def test_shape_draws_the_public_codes_offsets_or_the_papers() -> None:
    """The public code draws k from {low, …, high−1} = {0..K−1} (``exclusive_max``); the paper (the
    default) from {0..K}."""
    case, k = shape_case("train")[0], fixture("shape")["pe_noise_size"]
    like = torch.zeros(1)
    public = public_shape().sample_offsets(4000, 1, like).unique().tolist()
    assert public == list(range(case["draw_low"], case["draw_high"]))
    paper = ShapeAugmentation(ShapeParams(max_shift=k)).sample_offsets(4000, 1, like).unique().tolist()
    assert paper == list(range(case["draw_low"], case["draw_high"] + 1))


def test_shape_public_variant_equals_positional_encoding_at_inference() -> None:
    data = fixture("shape")
    expected = tensor(shape_case("eval")[0]["output"])
    close(shape_embedding(public_shape().eval(), data["length"], data["batch"]), expected)
    # the paper's inference (the default): k = 0, so the public code's output is PE shifted by K
    paper = ShapeAugmentation(ShapeParams(max_shift=data["pe_noise_size"])).eval()
    far(shape_embedding(paper, data["length"], data["batch"]), expected, 0.5)
    shifted = torch.arange(data["length"], dtype=torch.float32).expand(data["batch"], -1) + data["pe_noise_size"]
    close(shape_embedding(paper, data["length"], data["batch"], shifted), expected)


@pytest.mark.parametrize("case", shape_case("step"), ids=lambda c: f"step{c['step']}")
def test_shape_public_variant_equals_positional_encoding_in_a_decoding_step(case: dict[str, Any]) -> None:
    data, step = fixture("shape"), case["step"]
    positions = public_shape().eval().decode_positions(step + 1, "cpu")[:, step:].expand(data["batch"], 1)
    pe = SinusoidalPosition(data["dim"], SinusoidalParams())
    mask = torch.ones(data["batch"], 1, dtype=torch.bool)
    close(pe(torch.zeros(data["batch"], 1, data["dim"]), positions, mask), tensor(case["output"]))


# --- CAPE 1-D ------------------------------------------------------------------------------------


def cape1d(**overrides: Any) -> CapeAugmentation:
    data = fixture("cape1d")
    return CapeAugmentation(CapeParams(max_global_shift=data["max_global_shift"], max_local_shift=data["max_local_shift"],
                                       max_global_scaling=data["max_global_scaling"], mean_normalize=data["normalize"],
                                       **overrides))


def cape1d_cases(mode: str, padded: bool, alpha: bool = False) -> list[dict[str, Any]]:
    return [c for c in fixture("cape1d")["cases"]
            if c["mode"] == mode and (c["lengths"] is not None) == padded and (c["positions_delta"] is not None) == alpha]


def with_draws(monkeypatch, case: dict[str, Any], extra: int = 0) -> None:
    """posenc's CAPE draws ``u (B, 2 + ΣL)``: u₀ → Δ, u₁ → log λ, then the local shifts (cape.augment);
    they become the reference's unit draws (and zeros for ``extra`` further positions)."""
    shift, scale, local = tensor(case["shift"]), tensor(case["scale"]), tensor(case["local"])
    u = torch.cat((shift, scale, local, torch.zeros(local.shape[0], extra, dtype=local.dtype)), 1).float()

    def unit_uniform(batch: int, width: int, like: torch.Tensor) -> torch.Tensor:
        assert (batch, width) == tuple(u.shape)
        return u.to(like.dtype)

    monkeypatch.setattr(cape_module, "unit_uniform", unit_uniform)


def cape1d_embedding(positions: torch.Tensor) -> torch.Tensor:
    return sinusoidal_embedding(positions, fixture("cape1d")["dim"])


def cape1d_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    data = fixture("cape1d")
    return (torch.arange(data["length"], dtype=torch.float32).expand(data["batch"], -1),
            torch.ones(data["batch"], data["length"], dtype=torch.bool))


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_cape1d_equals_the_reference_on_unpadded_input(mode: str, monkeypatch) -> None:
    (case,) = cape1d_cases(mode, padded=False)
    aug = cape1d().train(mode == "train")
    if mode == "train":
        with_draws(monkeypatch, case)
    close(cape1d_embedding(aug(*cape1d_inputs())), tensor(case["output"]))


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_cape1d_padded_mean_is_the_references_without_its_first_pad(mode: str, monkeypatch) -> None:
    """The reference marks pads with ``positions > x_lengths``, so its mean over a padded row includes
    the first pad; posenc's (CAPE §4 step i) runs over the real tokens. Counting that pad as real in
    posenc gives the reference's output; posenc's own mask does not (except on the full row)."""
    (case,) = cape1d_cases(mode, padded=True)
    positions, _ = cape1d_inputs()
    lengths = torch.tensor(case["lengths"])
    real = torch.arange(positions.shape[1])[None] < lengths[:, None]
    with_the_first_pad = torch.arange(positions.shape[1])[None] <= lengths[:, None]
    expected = tensor(case["output"])
    aug = cape1d().train(mode == "train")
    if mode == "train":
        with_draws(monkeypatch, case)
    close(cape1d_embedding(aug(positions, with_the_first_pad))[real], expected[real])
    ours = cape1d_embedding(aug(positions, real))
    full = lengths == positions.shape[1]
    close(ours[full], expected[full])
    far(ours[real & ~full[:, None]], expected[real & ~full[:, None]], 0.05)


def test_cape1d_local_shift_is_not_scaled_by_alpha(monkeypatch) -> None:
    """Translation's α scales the source positions (§5.3). The reference also multiplies the local
    shifts by α (``delta_local *= positions_delta``); posenc draws ε from U(−εmax, εmax) as Eq. 6 says.
    With the same unit draws posenc equals the reference whose draws were divided by α."""
    cases = cape1d_cases("train", padded=False, alpha=True)
    (scaled,) = [c for c in cases if c["local_divisor"] == 1.0]
    (unscaled,) = [c for c in cases if c["local_divisor"] != 1.0]
    alpha = unscaled["positions_delta"]
    assert unscaled["local_divisor"] == alpha
    positions, mask = cape1d_inputs()
    target = torch.arange(4, dtype=torch.float32).expand(positions.shape[0], -1)
    aug = cape1d(source_scale=alpha).train()
    with_draws(monkeypatch, unscaled, extra=target.shape[1])
    src, _ = aug.pair(positions, mask, target, torch.ones_like(target, dtype=torch.bool))
    close(cape1d_embedding(src), tensor(unscaled["output"]))
    far(cape1d_embedding(src), tensor(scaled["output"]), 0.01)


# --- CAPE 2-D ------------------------------------------------------------------------------------


def cape2d_cases(mode: str) -> list[dict[str, Any]]:
    return [c for c in fixture("cape2d")["cases"] if c["mode"] == mode]


def row_major(grid: torch.Tensor) -> torch.Tensor:
    """The reference's ``(B, nx, ny, ...)`` layout (x index first) → posenc's row-major patches
    ``(B, ny·nx, ...)`` (row = y index, column = x index)."""
    b, nx, ny = grid.shape[:3]
    return grid.transpose(1, 2).reshape(b, ny * nx, *grid.shape[3:])


def reference_coordinates(centres: torch.Tensor, nx: int, ny: int) -> torch.Tensor:
    """posenc's patch centres −1 + (2i+1)/n → the reference's linspace(−1, 1, n): a scale of n/(n−1) per axis."""
    return centres * torch.tensor([nx / (nx - 1), ny / (ny - 1)], dtype=centres.dtype)


def reference_frequencies(w_x: torch.Tensor, w_y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """posenc's Eq. 4, w_k = 10^{2k/D}(cos k, sin k) for k = 1..K (K = D/2), → the reference's
    10^{j/(K−1)}(cos j, sin j) for j = 0..K−1: the index one lower, the exponent linspace(0, 1, K)."""
    k = w_x.shape[0]
    angle = torch.atan2(w_y, w_x) - 1.0
    exponent = (torch.log10(torch.hypot(w_x, w_y)) * k - 1.0) / (k - 1)
    rho = 10.0**exponent
    return rho * torch.cos(angle), rho * torch.sin(angle)


def reference_layout(embedding: torch.Tensor) -> torch.Tensor:
    """posenc's interleaved (cos, sin) pairs (Eq. 3) → the reference's [all cos, all sin]."""
    return torch.cat((embedding[..., 0::2], embedding[..., 1::2]), -1)


def in_reference_form(centres: torch.Tensor, nx: int, ny: int) -> torch.Tensor:
    """posenc's 2-D sinusoid of its centres with the three documented changes: what CAPE2d computes."""
    w_x, w_y = reference_frequencies(*cape_frequencies(fixture("cape2d")["dim"]))
    return reference_layout(sinusoidal_2d(reference_coordinates(centres.double(), nx, ny), w_x, w_y))


def test_cape2d_frequencies_are_the_references_with_its_indexing() -> None:
    data = fixture("cape2d")
    w_x, w_y = reference_frequencies(*cape_frequencies(data["dim"]))
    close(w_x, tensor(data["w_x"]), 1e-6)
    close(w_y, tensor(data["w_y"]), 1e-6)
    far(cape_frequencies(data["dim"])[0], tensor(data["w_x"]), 0.5)


@pytest.mark.parametrize("case", fixture("cape2d")["cases"], ids=lambda c: f"{c['mode']}-{c['nx']}x{c['ny']}")
def test_cape2d_equation_3_equals_the_reference_on_its_coordinates(case: dict[str, Any]) -> None:
    """Eq. 3 (π, cos and sin of w·p) as CAPE2d computes it, on the reference's own (augmented)
    coordinates and frequencies; only the layout is changed."""
    data = fixture("cape2d")
    coords = torch.stack((row_major(tensor(case["x_aug"])), row_major(tensor(case["y_aug"]))), -1)
    embedding = sinusoidal_2d(coords, tensor(data["w_x"]), tensor(data["w_y"]))
    expected = row_major(tensor(case["output"]))
    close(reference_layout(embedding), expected)
    far(embedding, expected, 0.5)  # the layouts differ


@pytest.mark.parametrize("case", cape2d_cases("eval"), ids=lambda c: f"{c['nx']}x{c['ny']}")
def test_cape2d_differs_from_the_reference_exactly_by_coordinates_frequencies_and_layout(case: dict[str, Any]) -> None:
    data, nx, ny = fixture("cape2d"), case["nx"], case["ny"]
    centres = patch_centres(ny, nx)
    close(reference_coordinates(centres.double(), nx, ny),
          torch.stack((row_major(tensor(case["x"]))[0], row_major(tensor(case["y"]))[0]), -1), 1e-6)
    expected = row_major(tensor(case["output"]))
    close(in_reference_form(centres, nx, ny).expand_as(expected), expected)
    method = SinusoidalPosition2d(data["dim"], Sinusoidal2dParams())
    shipped = method(torch.zeros(1, nx * ny, data["dim"]), centres[None], torch.ones(1, nx * ny, dtype=torch.bool))
    far(shipped.expand_as(expected), expected, 1.0)
    # each change alone is needed: drop one and the reference is not reached
    w_x, w_y = reference_frequencies(*cape_frequencies(data["dim"]))
    coords = reference_coordinates(centres.double(), nx, ny)
    far(reference_layout(sinusoidal_2d(centres.double(), w_x, w_y)).expand_as(expected), expected, 0.1)
    far(reference_layout(sinusoidal_2d(coords, *cape_frequencies(data["dim"]))).expand_as(expected), expected, 0.1)
    far(sinusoidal_2d(coords, w_x, w_y).expand_as(expected), expected, 0.1)


@pytest.mark.parametrize("case", cape2d_cases("train"), ids=lambda c: f"{c['nx']}x{c['ny']}")
def test_cape2d_augmentation_equals_the_references_with_the_same_draws(case: dict[str, Any], monkeypatch) -> None:
    """Steps ii-iv with the reference's unit draws, posenc's parameters in its own coordinates: the
    global shift Δmax·(n−1)/n, and the local shift εmax = local_shift/n (posenc, ε = 1/N at 1.0) for the
    reference's max_local_shift·2/(n−1) (a fraction of its spacing), so local_shift = 2·max_local_shift.
    Mapped to the reference's coordinates, the augmented centres and the embedding are CAPE2d's."""
    data, n = fixture("cape2d"), case["nx"]
    assert case["ny"] == n  # one global-shift bound for both axes
    b = data["batch"]
    draws = {
        (b, 1, 2): torch.cat((tensor(case["shift_x"]), tensor(case["shift_y"])), -1),
        (b, n * n, 2): torch.stack((row_major(tensor(case["local_x"])), row_major(tensor(case["local_y"]))), -1),
        (b, 1, 1): tensor(case["scale"]),
    }

    def uniform(shape: tuple[int, ...], bound: torch.Tensor | float, like: torch.Tensor) -> torch.Tensor:
        u = draws.pop(tuple(shape)).to(like.dtype)
        return u * (bound.to(like.dtype) if isinstance(bound, torch.Tensor) else bound)

    monkeypatch.setattr(cape2d_module, "_uniform", uniform)
    params = Cape2dParams(max_global_shift=data["max_global_shift"] * (n - 1) / n,
                          local_shift=2 * data["max_local_shift"], max_global_scaling=data["max_global_scaling"])
    centres = patch_centres(n, n)[None].expand(b, -1, -1)
    augmented = CapeAugmentation2d(params).train()(centres, torch.ones(b, n * n, dtype=torch.bool))
    assert not draws
    expected = torch.stack((row_major(tensor(case["x_aug"])), row_major(tensor(case["y_aug"]))), -1)
    close(reference_coordinates(augmented.double(), n, n), expected, 1e-6)
    close(in_reference_form(augmented, n, n), row_major(tensor(case["output"])))
