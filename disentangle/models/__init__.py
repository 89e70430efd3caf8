"""LightningModules: one shared autoencoder; each method is a config of it or a small subclass."""
from .autoencoder import Autoencoder, NonFiniteLossError, bce_reconstruction

__all__ = ["Autoencoder", "NonFiniteLossError", "bce_reconstruction"]
