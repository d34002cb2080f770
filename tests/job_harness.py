"""One-call checks for a training or fine-tuning job, shared by every family's job tests.

>>> result = check_job(lambda out, steps: train_electra(out, steps=steps, **TINY), tmp_path, steps=6, split_at=3,
...                    export=lambda run, to: export_embedder_run(run, to),
...                    export_calls=[("serving_default", {"text": ["a b c"]})])

``check_job`` runs the job on a tiny configuration and checks the road every job shares:

1. **a tiny run**: ``steps`` steps into a fresh run directory: ``config.json`` names the job's run family,
   ``history.json`` and ``metrics.json`` are written, and ``load_run`` rebuilds the model at step ``steps``;
2. **resume**: the same job stopped after ``split_at`` steps and run again to ``steps`` in a second directory
   gives the uninterrupted run's weights (exact resume: the dataset, the schedule, the optimizer state and the
   random streams all continue where they were);
3. **export** (optional): ``export(run, to)`` writes a SavedModel version of the resumed run;
4. **load with kerasplm blocked** (optional): ``export_calls`` run in a process where ``import kerasplm`` fails
   and only TensorFlow and tensorflow-text are loaded (``tests/export/contract.py``), their outputs returned.

The family's test then asserts what is its own on the returned :class:`JobCheck`. Keep the configuration tiny:
the job runs three times (``steps``, ``split_at``, and ``steps`` again); ``run=`` hands it a run the test module
already trained for ``steps`` steps with the same ``train`` (a module fixture), which saves the first.
"""
import dataclasses
import json
import os

import numpy as np

from kerasplm.runs import load_run
from tests.export.contract import run_isolated


@dataclasses.dataclass
class JobCheck:
    """What :func:`check_job` made: both runs, their summaries, the loaded model, the export and its answers."""

    run: str                 # the uninterrupted run directory
    resumed_run: str         # the run stopped at split_at and resumed
    summary: dict            # the uninterrupted job's summary (what train_*/finetune_* return; None: run= given)
    resumed_summary: dict
    model: object            # load_run(run)
    config: dict             # the run's config.json
    export_path: str = None
    export_outputs: list = None


def check_job(train, tmp_path, *, steps, split_at, run=None, family=None, between=None, export=None,
              export_calls=None, rtol=1e-5, atol=1e-6):
    """Run ``train(out, steps)`` as above; ``run``: an uninterrupted run already made by ``train(run, steps)``;
    ``family``: the run family config.json must record; ``between(run_dir)``: called on the interrupted run
    before it resumes (to make it look as an older kerasplm wrote it, say)."""
    assert 0 < split_at < steps, (split_at, steps)
    resumed_run = str(tmp_path / "resumed")
    if run is None:
        run = str(tmp_path / "run")
        summary = train(run, steps)
    else:
        run, summary = str(run), None
    with open(os.path.join(run, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    if family is not None:
        assert config["family"] == family, config["family"]
    for name in ("history.json", "metrics.json"):
        assert os.path.isfile(os.path.join(run, name)), name
    model = load_run(run)
    assert model.run_info.step == steps, model.run_info.step

    train(resumed_run, split_at)
    if between is not None:
        between(resumed_run)
    resumed_summary = train(resumed_run, steps)
    resumed = load_run(resumed_run)
    assert resumed.run_info.step == steps
    # In order, not by path: a second model of the same name in one process gets uniquified layer names.
    assert len(model.weights) == len(resumed.weights)
    for expected, actual in zip(model.weights, resumed.weights):
        assert expected.shape == actual.shape, expected.path
        np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=rtol, atol=atol,
                                   err_msg=f"resumed weight {expected.path}")

    result = JobCheck(run, resumed_run, summary, resumed_summary, model, config)
    if export is not None:
        result.export_path = str(export(resumed_run, str(tmp_path / "export")))
        assert os.path.isfile(os.path.join(result.export_path, "saved_model.pb")), result.export_path
        if export_calls:
            result.export_outputs = run_isolated(result.export_path, export_calls)
    return result
