"""The geometry of ``com.microsoft::MatMulNBits`` both providers check the same way: its
attributes K, N, bits and block_size, and the sizes they give B's rows."""

from __future__ import annotations

import attrs

from onnx_ep.core.kernel import NodeMeta
from onnx_ep.errors import NodeError

#: the code widths MatMulNBits packs (onnxruntime: 2, 4 and 8)
NBITS_BITS = (2, 4, 8)


@attrs.frozen
class NBitsGeometry:
    """One node's attributes K, N, bits and block_size (checked by :func:`nbits_geometry`)."""

    k: int
    n: int
    bits: int
    block: int

    @property
    def n_blocks(self) -> int:
        return -(-self.k // self.block)

    @property
    def blob(self) -> int:
        """Bytes of one block of codes."""
        return self.block * self.bits // 8

    @property
    def padded_k(self) -> int:
        """K rounded up to whole blocks: the codes of one row of B."""
        return self.n_blocks * self.block


def nbits_geometry(meta: NodeMeta) -> NBitsGeometry:
    """THE MatMulNBits attribute check.

    :raises NodeError: a missing K, N or block_size, K or N below 1, bits other than 2, 4,
        8, a block_size that is not a power of two >= 16.
    """
    def bad(message: str) -> NodeError:
        return NodeError(message, node=meta.name, op_type=meta.op_type)

    try:
        k, n, block = (int(meta.attrs[a]) for a in ("K", "N", "block_size"))
    except KeyError as exc:
        raise bad(f"attribute {exc.args[0]} is required") from None
    bits = int(meta.attr("bits", 4))
    if k < 1 or n < 1:
        raise bad(f"K and N must be >= 1, got K={k}, N={n}")
    if bits not in NBITS_BITS:
        raise bad(f"bits={bits} is not supported (supported: {NBITS_BITS})")
    if block < 16 or block & (block - 1):
        raise bad(f"block_size must be a power of two >= 16, got {block}")
    return NBitsGeometry(k, n, bits, block)
