"""Fine-tune a GPT run as GPT-1 did (Radford et al. 2018, sections 3.2–3.3, 4.1): ``kerasplm finetune gpt-classifier``.

The recipe (paper section 4.1, "Fine-tuning details"; the seed ``001_*`` lists the same numbers): the pretrained
GPT's token embedding grows by three rows for ``start``/``delim``/``extract`` (:mod:`kerasplm.models.gpt.preprocessor`,
:func:`kerasplm.models.gpt.classifier.grow_token_embedding`); a linear layer on the extract token's hidden state with
dropout 0.1; loss = task cross-entropy + 0.5 · LM loss (eq. 5); learning rate 6.25e-5, batch 32, 3 epochs, linear
warmup over 0.2 % of training then linear decay to 0; weight decay 0.01 on all but biases and LayerNorm gains
(the fine-tuning optimizer, :func:`kerasplm.jobs.finetuning.make_optimizer`, whose Adam ε is 1e-6 where GPT-1's
code used 1e-8).

``--init`` is a GPT run directory: one trained by ``kerasplm train gpt`` (SentencePiece) or converted by
``kerasplm convert gpt2`` (GPT-2's BPE); its tokenizer files are copied into the new run. ``--random-init`` keeps
its architecture and tokenizer but draws fresh weights: the baseline without pretraining.

Data, options and outputs are the BERT classifier job's (:class:`kerasplm.jobs.finetuning.ClassificationJob`: the
same TSV reader, dev accuracy/F1/MCC in ``metrics.json``, resumable) with ``--task`` choosing GPT-1's input
transformation: ``classification`` (``start text extract``), ``entailment`` (``start premise delim hypothesis
extract``, needs ``--pair-col``) or ``similarity`` (both orders, the two extract states added; needs
``--pair-col``). Multiple choice (:class:`kerasplm.models.gpt.classifier.GPTClassifier` with
``task_type="multiple_choice"``) needs a variable number of answers per example and is not a TSV job.

Run directory: family ``gpt_classifier``; ``model`` = the :class:`GPTClassifier`'s config (the grown backbone,
``num_labels``, ``labels``, ``pair_input``, ``dropout``, ``task_type``, ``lm_weight``), ``preprocessor`` = the
:class:`GPTClassifierPreprocessor`'s (the tokenizer, ``special_ids``, ``max_length``, task type); the tokenizer files
of the init run. :func:`load_gpt_classifier` is :func:`kerasplm.runs.load_run`.

>>> summary = finetune_gpt_classifier("runs/sst2-gpt", train="sst2/train.tsv", dev="sst2/dev.tsv", init="runs/gpt")
>>> summary["dev"]["accuracy"]
"""
import keras

from kerasplm.models.gpt.manifest import GPTClassifierOptions
from kerasplm.jobs.finetuning import ClassificationJob
from kerasplm.models.gpt.model import GPTBackbone
from kerasplm.models.gpt.generator import RUN_FAMILY as GPT_FAMILY
from kerasplm.models.gpt.generator import WHAT as GPT_WHAT
from kerasplm.models.gpt.generator import run_tokenizer
from kerasplm.models.gpt.classifier import GPTClassifier, grow_token_embedding
from kerasplm.runs import load_run
from kerasplm.runs.serialization import deserialize, serialize
from kerasplm.models.gpt.preprocessor import GPTClassifierPreprocessor, special_token_ids

FAMILY = "gpt_classifier"
WHAT = "GPT classifier"


class GPTClassifierJob(ClassificationJob):
    """``kerasplm finetune gpt-classifier``: GPT-1's fine-tuning (the task's input transformation, a linear layer
    on the extract token's state, task loss + λ·LM loss) on a GPT run."""

    family, options_class, what = FAMILY, GPTClassifierOptions, WHAT
    task = "classification"   # config.json's task: the run's --task (GPT-1's input transformation)

    def build_data(self):
        super().build_data()   # the training file, the schedule
        if self.resumed:
            stored = self.stored_model()   # its labels and preprocessor (the base rebuilds the model to train)
            self.backbone_config, self.labels = stored.backbone.config, list(stored.labels)
            preprocessor = stored.preprocessor
        else:
            preprocessor = self._start_run()
        self.classification_data(preprocessor)

    def _start_run(self):
        """A new run: the init run's tokenizer files, the grown backbone (pretrained or fresh weights), the run's
        config (``max_length`` settled). Returns the preprocessor."""
        o = self.options
        if o.init is None:
            raise ValueError("give the GPT run to start from (init / --init; with random_init / --random-init only "
                             "its architecture and tokenizer are used)")
        keras.utils.set_random_seed(o.seed)
        pretrained_model = load_run(o.init, family=GPT_FAMILY, what=GPT_WHAT)
        tokenizer = run_tokenizer(pretrained_model)   # a clear error for a run without one
        pretrained = pretrained_model.backbone
        positions = pretrained.config.max_positions
        o = self.options = o.replace(max_length=o.max_length or min(128, positions))
        if o.max_length > positions:
            raise ValueError(f"max_length={o.max_length} exceeds the model's {positions} positions")
        special_ids = special_token_ids(pretrained.config.vocab_size)
        backbone = grow_token_embedding(pretrained)
        if o.random_init:
            backbone = GPTBackbone.from_config_object(backbone.config, name=backbone.name)
        self.init_backbone, self.backbone_config = backbone, backbone.config
        self.labels = self.new_labels()
        assets, init_config = self.copy_init_assets()
        if self.run_dir.writer:   # the same tokenizer, reading the copies of its files in this run
            tokenizer = deserialize(serialize(tokenizer, o.init), self.run_dir.path)
        self.task = o.task
        self.write_config(init_config.get("preset", "custom"), assets=assets)
        self.log(f"started from {o.init} ({'fresh weights' if o.random_init else 'pretrained'}; {tokenizer.vocab_size} "
                 f"tokens + start/delim/extract at ids {special_ids['start']}..{special_ids['extract']})")
        return GPTClassifierPreprocessor(tokenizer, special_ids, o.max_length, o.task)

    def build_model(self):
        o = self.options
        return GPTClassifier(self.starting_backbone(GPTBackbone), len(self.labels), task_type=o.task, dropout=o.dropout,
                             lm_weight=o.lm_weight, labels=self.labels, pair_input=self.preprocessor.pair_input,
                             preprocessor=self.preprocessor)


def finetune_gpt_classifier(out, options=None, log=print, **overrides):
    """Fine-tune (or resume) a GPT-1-style classifier in run directory ``out``; score ``dev``; returns the summary.

    ``options``: a :class:`GPTClassifierOptions`; keyword ``overrides`` replace single options. Without ``steps``
    and ``time_budget`` it trains ``epochs`` epochs. The summary (also ``metrics.json``) has the training figures
    (the "loss" is L_3 = task + λ·LM, "loss_task"/"loss_lm" its terms) and ``dev`` (accuracy, F1, MCC);
    "classifier" is the trained :class:`GPTClassifier`.
    """
    return GPTClassifierJob(out, options, log, **overrides).run()


def load_gpt_classifier(run_dir):
    """The :class:`GPTClassifier` of a ``gpt_classifier`` run (:func:`kerasplm.runs.load_run`): checkpoint restored,
    ``preprocessor`` (strings -> inputs), ``labels`` (class names) and ``pair_input`` from its config."""
    return load_run(run_dir, family=FAMILY, what=f"a {WHAT} run (kerasplm finetune gpt-classifier)")
