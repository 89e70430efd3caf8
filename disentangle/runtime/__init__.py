"""The training runtime: what turns a composed config into a run that survives, and what it records.

* :mod:`~disentangle.runtime.run`: build the job (data, model, trainer, loggers, callbacks) and train it;
* :mod:`~disentangle.runtime.config`: the config resolvers, validation and one-line errors;
* :mod:`~disentangle.runtime.paths`: where ``conf/`` and ``sweeps/`` are (checkout or wheel);
* :mod:`~disentangle.runtime.checkpointing`: atomic checkpoints, RNG state, resuming, loading a trained model;
* :mod:`~disentangle.runtime.multirun`: a sweep's failed jobs;
* :mod:`~disentangle.runtime.loggers` and :mod:`~disentangle.runtime.wandb_log`: CSV and W&B logging;
* :mod:`~disentangle.runtime.families`: the model families a training run can differ in;
* :mod:`~disentangle.runtime.dry_run`: ``dry_run=true``, a run's or a sweep's jobs listed with their estimated times,
  nothing run (the measured figures it estimates from: :mod:`~disentangle.runtime.step_figures`).

Precision, schedules, devices and provenance, which the layers below also use, live in
:mod:`disentangle.foundation`: no library module imports the runtime (``tests/test_layering.py``).
"""
