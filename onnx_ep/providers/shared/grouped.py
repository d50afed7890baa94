"""The geometry of ``onnx_ep.fused::GroupedMatMul`` both providers check the same way."""

from __future__ import annotations


def grouped_shapes(a: tuple[int, ...], b: tuple[int, ...], trans_b: bool) -> str | None:
    """Why ``GroupedMatMul`` cannot multiply shapes ``a`` and ``b``, or ``None``."""
    if len(a) < 3 or len(b) != len(a):
        return (f"GroupedMatMul needs A [..., H, M, K] and B [..., G, K, N] of one rank, at "
                f"least 3, got shapes {a} and {b}")
    h, g = a[-3], b[-3]
    if g == 0 or h % g:
        return f"A's {h} heads are not a whole number of B's {g} groups"
    if a[:-3] != b[:-3]:
        return f"batch dimensions {a[:-3]} and {b[:-3]} differ"
    k_b = b[-1] if trans_b else b[-2]
    if a[-1] != k_b:
        return f"inner dimensions differ: A {a} has K={a[-1]}, B {b} has K={k_b}"
    return None
