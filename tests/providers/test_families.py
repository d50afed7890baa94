"""Op families are named alike in both providers: an op both implement lives in modules of
the same name (``cpu_reference/softmax.py`` and ``cuda/kernels/softmax.py``), so a reader
who knows where one provider keeps an op finds it in the other."""

from __future__ import annotations

from onnx_ep.providers import cpu_reference, cuda


def _family_of(modules) -> dict[tuple[str, str], str]:
    return {(k.key.domain, k.key.op_type): m.__name__.rsplit(".", 1)[1]
            for m in modules for k in m.KERNELS}


def test_an_op_both_providers_implement_sits_in_same_named_modules():
    cpu = _family_of(cpu_reference.family_modules())
    gpu = _family_of(cuda.kernel_modules())
    both = cpu.keys() & gpu.keys()
    assert len(both) > 100
    apart = sorted(f"{op[1]}: cpu_reference/{cpu[op]}.py, cuda/kernels/{gpu[op]}.py"
                   for op in both if cpu[op] != gpu[op])
    assert not apart, "; ".join(apart)


def test_every_family_module_is_listed_once():
    for modules in (cpu_reference.family_modules(), cuda.kernel_modules()):
        names = [m.__name__ for m in modules]
        assert len(names) == len(set(names))
        assert all(isinstance(m.KERNELS, list) and m.KERNELS for m in modules)


def test_no_module_with_kernels_is_left_out_of_the_family_list():
    from pathlib import Path

    for pkg, modules in ((cpu_reference, cpu_reference.family_modules()),
                         (cuda, cuda.kernel_modules())):
        root = Path(modules[0].__file__).parent
        defining = {p.stem for p in root.glob("*.py")
                    if any(line.startswith("KERNELS") for line in p.read_text().splitlines())}
        listed = {m.__name__.rsplit(".", 1)[1] for m in modules}
        assert defining == listed, f"{pkg.__name__}: {sorted(defining ^ listed)}"
