"""LightningModules: one shared autoencoder; each method is a config of it or a small subclass. The GANs
(InfoWGAN-GP, QLInfoWGAN-GP) are the second family, sharing its latent modules, networks and evaluation."""
from .autoencoder import Autoencoder, NonFiniteLossError, bce_reconstruction
from .gan import InfoWGAN

__all__ = ["Autoencoder", "InfoWGAN", "NonFiniteLossError", "bce_reconstruction"]
