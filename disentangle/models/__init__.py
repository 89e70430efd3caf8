"""LightningModules. :class:`LatentModel` (``base.py``) holds what every method shares and the model contract the
rest of the package talks to; :class:`Autoencoder` (every autoencoder method is a config of it or a small
subclass) and :class:`InfoWGAN` (the GANs: InfoWGAN-GP, QLInfoWGAN-GP) are its two families."""
from .autoencoder import Autoencoder, NonFiniteLossError, bce_reconstruction
from .base import EvaluableModel, LatentModel
from .gan import InfoWGAN

__all__ = ["Autoencoder", "EvaluableModel", "InfoWGAN", "LatentModel", "NonFiniteLossError", "bce_reconstruction"]
