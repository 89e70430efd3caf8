"""disentangle: disentangled representation learning with quantized latents."""

# the one place the version is written: pyproject.toml reads it (dynamic version), metrics.json records it
__version__ = "0.1.0"
