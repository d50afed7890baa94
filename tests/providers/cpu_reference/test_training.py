"""ai.onnx.preview.training optimizers against the update formulas of the ONNX spec."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import node_model, run_ours

DOMAIN = "ai.onnx.preview.training"
RNG = np.random.default_rng(6)


def _v(n: int) -> np.ndarray:
    return RNG.standard_normal(n).astype(np.float32)


def _run(op: str, feeds: dict[str, np.ndarray], n_out: int, **attrs: object) -> list:
    return run_ours(node_model(op, feeds, n_out, domain=DOMAIN, **attrs), feeds)


def test_adagrad_follows_the_spec_formula() -> None:
    r, t, x, g, h = np.float32(0.1), np.int64(3), _v(4), _v(4), np.abs(_v(4))
    feeds = {"r": np.array(r), "t": np.array(t), "x": x, "g": g, "h": h}
    x_new, h_new = _run("Adagrad", feeds, 2, decay_factor=0.1, epsilon=1e-5,
                        norm_coefficient=0.01)
    gr = 0.01 * x.astype(np.float64) + g
    hh = h + gr * gr
    np.testing.assert_allclose(h_new, hh, rtol=1e-6)
    np.testing.assert_allclose(x_new, x - r / (1 + 3 * 0.1) * gr / (np.sqrt(hh) + 1e-5),
                               rtol=1e-6)


def test_adam_with_two_tensor_groups_follows_the_spec_formula() -> None:
    xs, gs, vs, hs = [_v(3), _v(2)], [_v(3), _v(2)], [_v(3), _v(2)], [np.abs(_v(3)), np.abs(_v(2))]
    feeds = {"r": np.array(0.05, np.float32), "t": np.array(2, np.int64),
             **{f"x{i}": a for i, a in enumerate(xs)}, **{f"g{i}": a for i, a in enumerate(gs)},
             **{f"v{i}": a for i, a in enumerate(vs)}, **{f"h{i}": a for i, a in enumerate(hs)}}
    outs = _run("Adam", feeds, 6, alpha=0.9, beta=0.99, epsilon=1e-3)
    for i in range(2):
        g = gs[i].astype(np.float64)
        v = 0.9 * vs[i] + 0.1 * g
        h = 0.99 * hs[i] + 0.01 * g * g
        r = 0.05 * np.sqrt(1 - 0.99 ** 2) / (1 - 0.9 ** 2)
        np.testing.assert_allclose(outs[i], xs[i] - r * v / (np.sqrt(h) + 1e-3), rtol=1e-5)
        np.testing.assert_allclose(outs[2 + i], v, rtol=1e-6)
        np.testing.assert_allclose(outs[4 + i], h, rtol=1e-6)


@pytest.mark.parametrize("mode", ["standard", "nesterov"])
def test_momentum_follows_the_spec_formula(mode: str) -> None:
    x, g, v = _v(5), _v(5), _v(5)
    feeds = {"r": np.array(0.1, np.float32), "t": np.array(0, np.int64), "x": x, "g": g, "v": v}
    x_new, v_new = _run("Momentum", feeds, 2, alpha=0.9, beta=0.5, mode=mode,
                        norm_coefficient=0.0)
    want_v = 0.9 * v + 1.0 * g                   # beta is 1 at the first step (t = 0)
    np.testing.assert_allclose(v_new, want_v, rtol=1e-6)
    step = g + 0.9 * want_v if mode == "nesterov" else want_v
    np.testing.assert_allclose(x_new, x - 0.1 * step, rtol=1e-6)


def test_momentum_rejects_unknown_mode() -> None:
    feeds = {"r": np.array(0.1, np.float32), "t": np.array(0, np.int64), "x": _v(2),
             "g": _v(2), "v": _v(2)}
    with pytest.raises(NodeError, match="mode"):
        _run("Momentum", feeds, 2, alpha=0.9, beta=0.5, mode="heavy", norm_coefficient=0.0)
