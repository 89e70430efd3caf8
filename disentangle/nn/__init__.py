"""Encoders and decoders: plain nn.Modules sharing one contract (see :mod:`disentangle.nn.blocks`).

* :class:`ConvEncoder`, :class:`StyleDecoder`: QLAE's conv encoder and StyleGAN-like decoder (QLAE paper
  App. C.3).
* :class:`ResidualEncoder`, :class:`ResidualDecoder`: Tripod's residual architectures (the authors' code).
* :class:`DlibEncoder`, :class:`DlibDecoder`: disentanglement_lib's conv/deconv networks (Friede et al.
  App. 5).
* :class:`DalleEncoder`, :class:`DalleDecoder`: FactorQVAE's DALL-E-style residual networks (Baykal et al.
  App. A.3).
* :class:`SmallEncoder`, :class:`SmallDecoder`: a small architecture for CPU runs and tests.
* :class:`LachapelleEncoder` (ResNet-18 trunk), :class:`LachapelleDecoder`, :class:`AdditiveDecoder`: Lachapelle et
  al.'s balls networks, the additive one summing per-block decoders (Cliff paper App. G.2, F.3).
* :class:`MLPEncoder`: the fully connected encoder of Cliff's synthetic experiment, for vector data (Cliff
  App. G.1).
* :class:`CriticHead`: the QLAE paper's GAN critic, a linear head on an encoder's trunk (the authors' code).
* :class:`BroadcastDecoder`: the spatial-broadcast decoder of Friede et al.'s Circles experiment (App. 5,
  Table 3); ``model/arch=broadcast`` pairs it with :class:`DlibEncoder`.
"""

from .additive import AdditiveDecoder, LachapelleDecoder
from .broadcast import BroadcastDecoder
from .critic import CriticHead
from .dlib import DlibDecoder, DlibEncoder
from .factorqvae import DalleDecoder, DalleEncoder
from .mlp import MLPEncoder
from .qlae import ConvEncoder, StyleDecoder
from .resnet import LachapelleEncoder, ResNet18Trunk
from .small import SmallDecoder, SmallEncoder
from .tripod import ResidualDecoder, ResidualEncoder

__all__ = [
    "AdditiveDecoder",
    "BroadcastDecoder",
    "ConvEncoder",
    "CriticHead",
    "DalleDecoder",
    "DalleEncoder",
    "DlibDecoder",
    "DlibEncoder",
    "LachapelleDecoder",
    "LachapelleEncoder",
    "MLPEncoder",
    "ResNet18Trunk",
    "ResidualDecoder",
    "ResidualEncoder",
    "SmallDecoder",
    "SmallEncoder",
    "StyleDecoder",
]
