"""The Wasserstein critic of the QLAE paper's GANs: a linear head on the encoder's shared trunk (the authors'
code; QLAE paper Alg. 3).

The GANs' encoder and critic are one network with two heads: the encoder's conv + dense trunk
(``encoder.forward_features``) feeds both the latent head (``encoder.head``) and :class:`CriticHead`, a
Linear(features, 1) with bias. Both heads and the trunk are trained together by the encoder/critic optimizer
(Alg. 3 line 14; authors' code). Any encoder of :mod:`disentangle.nn` with a ``forward_features`` trunk and a
Linear ``head`` can carry it (:func:`trunk_width`).
"""

from __future__ import annotations

from torch import Tensor, nn

from .blocks import check_positive_int

__all__ = ["CriticHead", "trunk_width"]


class CriticHead(nn.Module):
    """Critic value C(x) = w·features(x) + b: Linear(in_features, 1) with bias, PyTorch's default init (the repo's
    equinox init). Returns one scalar per sample, shape (B,)."""

    def __init__(self, in_features: int):
        super().__init__()
        self.in_features = check_positive_int("in_features", in_features)
        self.linear = nn.Linear(self.in_features, 1)

    def forward(self, features: Tensor) -> Tensor:
        return self.linear(features).squeeze(-1)


def trunk_width(encoder: nn.Module) -> int:
    """Width of ``encoder.forward_features``'s output (the input of its Linear ``head``); ValueError naming the
    encoder when it has no shared trunk a critic head could sit on."""
    head = getattr(encoder, "head", None)
    if not callable(getattr(encoder, "forward_features", None)) or not isinstance(head, nn.Linear):
        # ValueError, not TypeError: the project's contract is one exception type for every bad option.
        raise ValueError(  # noqa: TRY004
            f"{type(encoder).__name__} has no forward_features trunk with a Linear head: the GAN's critic shares "
            f"the encoder's trunk (QLAE authors' code); e.g. model/arch=qlae, small or tripod"
        )
    return int(head.in_features)
