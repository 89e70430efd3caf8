"""disentangle: disentangled representation learning with quantized latents."""
