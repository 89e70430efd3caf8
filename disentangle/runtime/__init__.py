"""The training runtime: what turns a composed config into a run that survives, and what it records.

* :mod:`~disentangle.runtime.run`: build the job (data, model, trainer, loggers, callbacks) and train it;
* :mod:`~disentangle.runtime.config`: the config resolvers, validation and one-line errors;
* :mod:`~disentangle.runtime.paths`: where ``conf/`` and ``sweeps/`` are (checkout or wheel);
* :mod:`~disentangle.runtime.checkpointing`: atomic checkpoints, RNG state, resuming, loading a trained model;
* :mod:`~disentangle.runtime.precision`: ``trainer.precision``/``tf32`` and the fp32 islands;
* :mod:`~disentangle.runtime.devices`: job placement on a node's GPUs;
* :mod:`~disentangle.runtime.multirun`: a sweep's failed jobs;
* :mod:`~disentangle.runtime.loggers` and :mod:`~disentangle.runtime.wandb_log`: CSV and W&B logging;
* :mod:`~disentangle.runtime.schedules`: learning-rate schedules;
* :mod:`~disentangle.runtime.families`: the model families a training run can differ in;
* :mod:`~disentangle.runtime.provenance`: the software versions every ``metrics.json`` records.

Nothing is imported here: the layers below (models, regularizers, data, callbacks) import
``disentangle.runtime.precision``, ``schedules``, ``devices`` or ``provenance`` without pulling the rest of the
runtime in (``tests/test_layering.py``).
"""
