"""The parity harness (onnx_ep/testing/parity.py) and ``onnx-ep parity``, on the "fake" provider.

tests/helpers/fake_provider.py's kernels are deliberately exact (Neg), 1 ulp off within
``ulp(1)`` (Add), 3 ulp off beyond ``ulp(1)`` (Mul) and 1 ulp off while promising
``exact`` (Div); everything else falls back to cpu_reference.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep import Parity
from onnx_ep.cli import main
from onnx_ep.demo import build_demo_model, demo_feeds
from onnx_ep.testing.parity import ISOLATED, SHARED, compare
from tests.helpers.fake_provider import FAKE, PLUGIN
from tests.helpers.plugins import write_dist_info

X = np.linspace(0.5, 2.0, 12, dtype=np.float32).reshape(3, 4)
C = np.full((3, 4), 1.25, np.float32)


def chain_model(ops: list[str], *, extra_outputs: tuple[str, ...] = ()) -> onnx.ModelProto:
    """x -> op_1(., c) -> op_2(., c) ... -> y (Neg and Exp take one input); nodes ``<op>_<i>``."""
    nodes, prev = [], "x"
    for i, op in enumerate(ops):
        out = "y" if i == len(ops) - 1 else f"{op.lower()}_{i}"
        ins = [prev] if op in ("Neg", "Exp") else [prev, "c"]
        nodes.append(helper.make_node(op, ins, [out], name=f"{op.lower()}_{i}"))
        prev = out
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3, 4])
               for n in ("y", *extra_outputs)]
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                              outputs, initializer=[onnx.numpy_helper.from_array(C, "c")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def amplifying_model() -> onnx.ModelProto:
    """neg -> add (1 ulp, kept) -> mul (3 ulp, broken) -> cancel (m - ref_m) -> exp.

    ``ref_m`` is the reference's value of ``m``, so ``cancel`` turns mul's 3 ulp into
    ~1e9 ulp relative to the reference's exact zeros: the later nodes amplify the error.
    """
    ref_m = ((-X + np.float32(1)) * C).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["n"], name="neg"),
         helper.make_node("Add", ["n", "one"], ["a"], name="add"),
         helper.make_node("Mul", ["a", "c"], ["m"], name="mul"),
         helper.make_node("Sub", ["m", "ref_m"], ["s"], name="cancel"),
         helper.make_node("Exp", ["s"], ["y"], name="exp")],
        "amplify", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [3, 4])],
        initializer=[onnx.numpy_helper.from_array(np.ones(1, np.float32), "one"),
                     onnx.numpy_helper.from_array(C, "c"),
                     onnx.numpy_helper.from_array(ref_m, "ref_m")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def fake_compare(model: onnx.ModelProto, **kwargs):
    return compare(model, {"x": X}, provider=FAKE, plugins=[PLUGIN], **kwargs)


# ---------------------------------------------------------------- per output


def test_exact_kernel_gives_equal_bytes_and_keeps_its_promise() -> None:
    r = fake_compare(chain_model(["Neg"]))
    (y,) = r.outputs
    assert (y.name, y.dtype, y.shape, y.provider, y.node) == ("y", "float32", (3, 4), FAKE,
                                                             "neg_0")
    assert y.bytes_equal and y.kept and y.max_ulp == 0 and y.max_abs == 0
    assert y.promise == Parity.EXACT and r.ok and r.nodes is None and r.first_broken is None


def test_one_ulp_off_within_a_one_ulp_promise_is_kept() -> None:
    r = fake_compare(chain_model(["Add"]))
    (y,) = r.outputs
    assert not y.bytes_equal and y.differing == 12
    assert y.max_ulp == 1 and y.promise == Parity.ulp(1) and y.kept and r.ok
    assert 0 < y.max_abs < 1e-6 and 0 < y.max_rel < 2e-7


def test_three_ulp_off_breaks_a_one_ulp_promise() -> None:
    r = fake_compare(chain_model(["Mul"]))
    (y,) = r.outputs
    assert y.max_ulp == 3 and not y.kept and y.reason == "max ulp 3 > 1"
    assert not r.ok and r.broken_outputs == [y]


def test_declaring_exact_and_differing_is_broken() -> None:
    r = fake_compare(chain_model(["Div"]))
    (y,) = r.outputs
    assert y.promise == Parity.EXACT and y.max_ulp == 1 and not y.kept and not r.ok
    assert "elements differ; exact promised" in y.reason


def test_fallback_nodes_are_held_to_exact() -> None:
    # Sub has no fake kernel: cpu_reference runs it inside the fake session
    r = fake_compare(chain_model(["Sub"]))
    (y,) = r.outputs
    assert y.provider == "cpu_reference" and y.promise == Parity.EXACT and y.bytes_equal
    assert r.placement == {"cpu_reference": 1}


# ---------------------------------------------------------------- per node


def test_per_node_names_the_first_broken_node_even_when_later_nodes_amplify() -> None:
    r = fake_compare(amplifying_model(), per_node=True)
    # end to end, 3 ulp in m became an error of ~1e9 ulp in s (the reference's s is 0)
    s = next(o for o in r.outputs if o.name == "s")
    assert not s.kept and s.max_ulp > 10**8
    assert [n.name for n in r.nodes] == ["neg", "add", "mul", "cancel", "exp"]
    first = r.first_broken
    assert (first.name, first.op_type, first.provider, first.max_ulp) == ("mul", "Mul", FAKE, 3)
    assert first.promise == Parity.ulp(1) and first.max_abs > 0
    assert r.first_diverged.name == "add"
    by_name = {n.name: n for n in r.nodes}
    assert by_name["neg"].mode == SHARED and by_name["neg"].bytes_equal
    assert by_name["add"].mode == SHARED and by_name["add"].kept and by_name["add"].max_ulp == 1
    # fed the reference's inputs, the amplifying nodes reproduce the reference exactly
    for name in ("mul", "cancel", "exp"):
        assert by_name[name].mode == ISOLATED
    assert by_name["cancel"].bytes_equal and by_name["exp"].bytes_equal
    assert [n.name for n in r.nodes if not n.kept] == ["mul"] and not r.ok
    text = str(r)
    assert "BROKEN: first node breaking its promise: 'mul' (Mul on fake, promise <= 1 ulp): " \
           "max ulp 3" in text


def test_per_node_verdict_ignores_drift_that_only_comes_from_upstream() -> None:
    # add is 1 ulp off (kept); the fallback Sub after it is exact given equal inputs
    r = fake_compare(chain_model(["Add", "Sub"]), per_node=True)
    (y,) = r.outputs
    assert y.promise == Parity.EXACT and not y.kept           # end to end: drift
    assert all(n.kept for n in r.nodes) and r.ok and r.first_broken is None
    assert "OK: every node keeps its promise; outputs y drift" in str(r)
    assert not fake_compare(chain_model(["Add", "Sub"])).ok  # without per_node: outputs decide


def test_per_node_on_the_demo_transformer_blames_only_the_wrong_kernels() -> None:
    r = compare(build_demo_model(), demo_feeds(), provider=FAKE, per_node=True,
                plugins=[PLUGIN])
    assert len(r.nodes) == sum(r.placement.values())
    broken = {n.op_type for n in r.nodes if not n.kept}
    assert broken == {"Mul", "Div"}
    assert r.first_broken.op_type == "Mul" and r.first_broken.max_ulp == 3
    # every node before the first broken one kept its promise; Add nodes are 1 ulp off
    assert all(n.kept for n in r.nodes[:r.first_broken.index])
    assert all(n.kept and n.max_ulp <= 1 for n in r.nodes if n.op_type == "Add")


def test_report_to_dict_is_json_ready() -> None:
    r = fake_compare(amplifying_model(), per_node=True)
    d = json.loads(json.dumps(r.to_dict(), allow_nan=False))
    assert d["ok"] is False and d["provider"] == FAKE and d["reference"] == "cpu_reference"
    assert d["first_broken"]["name"] == "mul" and d["first_diverged"] == "add"
    assert d["first_broken"]["promise"] == {"kind": "ulp", "max_ulp": 1, "rtol": 0.0,
                                            "atol": 0.0, "text": "<= 1 ulp"}
    assert [o["name"] for o in d["outputs"]] == ["y", "s"] and len(d["nodes"]) == 5
    nan_out = compare(chain_model(["Neg"]), {"x": np.full((3, 4), np.nan, np.float32)},
                      provider=FAKE, plugins=[PLUGIN])
    assert nan_out.ok and nan_out.outputs[0].max_ulp == 0


def test_an_unavailable_provider_raises_provider_unavailable() -> None:
    from onnx_ep.errors import ProviderUnavailable

    with pytest.raises(ProviderUnavailable):
        compare(chain_model(["Neg"]), {"x": X}, provider="no_such_provider")


# ---------------------------------------------------------------- onnx-ep parity


@pytest.fixture
def fake_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake provider installed as a plugin through a real ``onnx_ep`` entry point."""
    write_dist_info(tmp_path / "site", "onnx-ep-fake-provider",
                    {"fake_provider": "tests.helpers.fake_provider:PLUGIN"})
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("ONNX_EP_PLUGINS", "fake_provider")


def _save(model: onnx.ModelProto, path: Path) -> str:
    onnx.save(model, path)
    return str(path)


@pytest.mark.usefixtures("fake_installed")
def test_cli_exits_0_when_every_promise_holds(tmp_path: Path, capsys) -> None:
    model = _save(chain_model(["Neg", "Add"]), tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", X)
    assert main(["parity", model, "--provider", "fake", "--input", f"x={tmp_path / 'x.npy'}"]) \
        == 0
    out, err = capsys.readouterr()
    assert f"parity of {model}: fake against cpu_reference" in out
    assert "OK: every promise holds" in out and "running on fake and cpu_reference" in err


@pytest.mark.usefixtures("fake_installed")
def test_cli_exits_1_on_a_broken_promise_and_names_the_node_per_node(
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _save(amplifying_model(), tmp_path / "m.onnx")
    # the provider defaults to the best available one other than the reference (on a GPU
    # machine that would be cuda, hence the pinned list)
    monkeypatch.setattr(onnx_ep, "available_providers", lambda: ["cpu_reference", FAKE])
    assert main(["parity", model, "--random-inputs"]) == 1
    assert "BROKEN: output(s) y, s break the promise" in capsys.readouterr().out
    assert main(["parity", model, "--random-inputs", "--per-node", "--json"]) == 1
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["first_broken"]["name"] == "mul" and report["provider"] == "fake"
    assert report["model"] == model and err == ""


def test_cli_demo_model_against_itself_exits_0(capsys) -> None:
    assert main(["parity", "--provider", "cpu_reference", "--per-node", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["outputs"][0]["name"] == "logits"
    assert all(n["bytes_equal"] for n in report["nodes"])


@pytest.mark.parametrize("argv", [
    ["parity", "missing.onnx", "--provider", "cpu_reference", "--random-inputs"],
    ["parity", "--provider", "no_such_provider"],
    ["parity", "--provider", "cpu_reference", "--reference", "no_such_provider"],
    ["parity"],   # only cpu_reference is available: nothing to compare it with
])
def test_cli_errors_exit_2(argv: list[str], capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onnx_ep, "available_providers", lambda: ["cpu_reference"])
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()   # progress lines, then the error
    assert lines[-1].startswith("error: ") and sum(x.startswith("error") for x in lines) == 1


def test_cli_missing_inputs_exit_2(tmp_path: Path, capsys) -> None:
    model = _save(chain_model(["Neg"]), tmp_path / "m.onnx")
    assert main(["parity", model, "--provider", "cpu_reference"]) == 2
    assert "no value for input(s) x; pass --input" in capsys.readouterr().err
