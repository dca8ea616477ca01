"""Where the bias of an ``Einsum`` layer goes: the output axes that come from the kernel.

``y = einsum(spec, inputs, kernel) + bias``: the bias has one axis per output axis the
kernel contributes (its letters, and the part of ``...`` the kernel covers), in output
order; every other output axis gets a 1 so the bias broadcasts. Shared by Linen's and NNX's
``Einsum`` so both build and add the same bias.

>>> bias_layout('abc,cde->abde', 3, (5, 6, 7))
((6, 7), (1, 1, 6, 7))
>>> bias_layout('d...ab,bc...->ad...c', 5, (4, 5, 6, 7))
((6, 7, 5), (1, 1, 6, 7, 5))
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["bias_layout", "check_einsum_str"]


def check_einsum_str(einsum_str: str, layer: str = "Einsum") -> str:
    """Returns ``einsum_str`` without spaces; raises ``ValueError`` unless it is explicit
    (has ``->``) with exactly two operands (the input and the kernel)."""
    einsum_str = einsum_str.replace(" ", "")
    if "->" not in einsum_str:
        raise ValueError(
            f'`einsum_str` equation must be explicit and include "->". {layer} got '
            f"{einsum_str!r}; write the output subscripts, e.g. 'ab,bc->ac'."
        )
    if einsum_str.count(",") != 1:
        raise ValueError(
            "`einsum_str` equation must have exactly two operands and therefore, exactly one "
            f"comma character, instead of {einsum_str.count(',')} ({layer} got {einsum_str!r}: "
            "the input and the kernel)."
        )
    return einsum_str


def _labels(spec: str, ndim: int, n_ellipsis_total: int) -> list:
    """One label per axis; ``...`` axes get ``('...', k)``, aligned to the right."""
    if "..." not in spec:
        return list(spec)
    head, _, tail = spec.partition("...")
    n = ndim - len(head) - len(tail)
    ellipsis = [("...", k) for k in range(n_ellipsis_total - n, n_ellipsis_total)]
    return [*head, *ellipsis, *tail]


def bias_layout(
    einsum_str: str, input_ndim: int, kernel_shape: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Returns ``(bias_shape, broadcast_shape)`` for ``einsum_str`` (spaces removed).

    ``bias_shape`` is the shape to create the bias with; ``broadcast_shape`` the shape to
    reshape it to before adding it to the output.
    """
    operands, out_spec = einsum_str.split("->")
    lhs_spec, rhs_spec = operands.split(",")
    kernel_shape = tuple(kernel_shape)

    def n_ellipsis(spec: str, ndim: int) -> int:
        return ndim - len(spec.replace("...", "")) if "..." in spec else 0

    total = max(n_ellipsis(lhs_spec, input_ndim), n_ellipsis(rhs_spec, len(kernel_shape)))
    kernel_labels = _labels(rhs_spec, len(kernel_shape), total)
    out_ndim = len(out_spec.replace("...", "")) + (total if "..." in out_spec else 0)
    out_labels = _labels(out_spec, out_ndim, total)
    bias_shape, broadcast = [], []
    for label in out_labels:
        if label in kernel_labels:
            size = kernel_shape[kernel_labels.index(label)]
            bias_shape.append(size)
            broadcast.append(size)
        else:
            broadcast.append(1)
    return tuple(bias_shape), tuple(broadcast)
