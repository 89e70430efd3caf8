"""The foundation every layer may stand on: small modules that import nothing of the package but ``errors`` and
``checks``, so that data, nn, quantizers, regularizers, models and callbacks use them without importing upward.

* :mod:`~disentangle.foundation.precision`: ``trainer.precision``/``tf32``, autocast state and the fp32 islands
  (models, regularizers, the runtime);
* :mod:`~disentangle.foundation.schedules`: learning-rate schedules (models, the TC discriminator);
* :mod:`~disentangle.foundation.devices`: job placement on a node's GPUs, how many jobs share one
  (``data.on_device=auto``, the runtime);
* :mod:`~disentangle.foundation.provenance`: the software versions every ``metrics.json`` records (callbacks);
* :mod:`~disentangle.foundation.sections`: a page's generated section between two marker lines (the claims, the GPU
  check and the dataset sources splice their tables into the docs with it).

They lived in :mod:`disentangle.runtime` until the layering was made to run downhill (issue 42); the names they had
there, and before that at the package's top, still import them (:data:`disentangle.MOVED`).
Nothing is imported here, so that importing one leaf pulls in no other.
"""
