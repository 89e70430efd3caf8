"""Encoders and decoders: plain nn.Modules sharing one contract (see :mod:`disentangle.nn.blocks`).

* :class:`ConvEncoder`, :class:`StyleDecoder`: QLAE's conv encoder and StyleGAN-like decoder (qlae spec §2).
* :class:`ResidualEncoder`, :class:`ResidualDecoder`: Tripod's residual architectures (tripod spec §6).
* :class:`DlibEncoder`, :class:`DlibDecoder`: disentanglement_lib's conv/deconv networks (categorical_vae spec §8).
* :class:`DalleEncoder`, :class:`DalleDecoder`: FactorQVAE's DALL-E-style residual networks (factorqvae spec §3.2).
* :class:`SmallEncoder`, :class:`SmallDecoder`: a small architecture for CPU runs and tests.
* :class:`LachapelleEncoder` (ResNet-18 trunk), :class:`LachapelleDecoder`, :class:`AdditiveDecoder`: Lachapelle et
  al.'s balls networks, the additive one summing per-block decoders (cliff spec §4.2, §6.2).
* :class:`MLPEncoder`: the fully connected encoder of Cliff's synthetic experiment, for vector data (cliff spec §4.1).
* :class:`CriticHead`: the QLAE paper's GAN critic, a linear head on an encoder's trunk (qlae spec §2.2).
* :class:`BroadcastDecoder`: the spatial-broadcast decoder of Friede et al.'s Circles experiment (categorical_vae spec §8
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
