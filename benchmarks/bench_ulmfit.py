"""ULMFiT's figures: WikiText-2 perplexity, the paper's ablations in small, and SST-2 against ELMo and BERT.

Every side is trained by its own ``kerasplm`` job (the commands a user runs), one after the other, so each has the
machine to itself; the results JSON records the machine, the load and every run's summary.

* ``perplexity``: ``train ulmfit-lm`` on WikiText-2's validation split (the train split is not in ../shared/data)
  for ``--time-budget`` seconds, the held-out perplexity per word on its test split (``--valid-corpus``).
* ``ablations``: from one general language model (``--lm RUN``, or trained first on WikiText-2 for
  ``--lm-budget`` seconds or ``--lm-steps`` steps), the language model fine-tuned for an epoch of SST-2's
  training sentences (text only; ``--target-lm-examples``), then ULMFiT's
  classifier on SST-2, scored on its dev set, for each variant and ``--seeds`` seeds: ``full`` (target-LM
  fine-tuning, discriminative rates 2.6, STLR, gradual unfreezing), ``no_discriminative`` (factor 1: one rate),
  ``no_stlr`` (warmup + linear decay), ``no_gradual_unfreezing``, ``no_target_lm`` (the classifier on the general
  language model), ``no_pretraining`` (the classifier from random weights: a language model with the target LM's
  sizes on the target text's vocabulary, trained one step at a rate of 1e-12). Each classifier trains ``--epochs``
  epochs (or ``--steps``). A stage whose run is already complete in ``--out`` (its ``metrics.json`` written) is read,
  not trained again, so an interrupted run picks up where it stopped; ``--target-lm`` starts from a target LM
  trained elsewhere and ``--variants`` runs some of the variants.
* ``compare``: SST-2 dev accuracy at an equal CPU budget ``--budget`` per method, split between its stages (each
  ended by its time budget, never by its job's default epochs; ``--max-examples`` SST-2 training examples for every
  classifier):
  ULMFiT (general LM ⅓, target LM ⅙, classifier ½), the ELMo classifier (biLM ½ on WikiText-2, classifier ½), a
  BERT pretrained here (½, ``--bert-preset``) and fine-tuned (½). ``--discriminative-lr`` sets the ULMFiT
  classifier's factor. Stages complete in ``--out`` are read back, as for the ablations, so the methods can be trained
  in separate invocations (each on an idle machine).

    python -m benchmarks.bench_ulmfit perplexity --time-budget 1800 --json ppl.json
    python -m benchmarks.bench_ulmfit ablations --lm runs/wt2_lm --seeds 3 --json ablations.json
    python -m benchmarks.bench_ulmfit compare --budget 3600 --json compare.json
    python -m benchmarks.bench_ulmfit ablations --smoke     # a few steps of everything (no figure)
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import load_average, machine_info, write_results  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.normpath(os.path.join(ROOT, "..", "shared", "data"))
WT2 = os.path.join(DATA, "wikitext2")
SST2 = os.path.join(DATA, "sst2")
VARIANTS = {
    "full": {},
    "no_discriminative": {"discriminative_lr": 1.0},
    "no_stlr": {"schedule": "linear"},
    "no_gradual_unfreezing": {"gradual_unfreezing": False},
    "no_target_lm": {"init": "general"},
    "no_pretraining": {"init": "random"},
}
SMOKE = dict(steps=2)
UNBOUNDED_EPOCHS = 10_000.0   # a language model trained for a time budget: epochs never end it first


def _quiet(summary):
    """A job's summary without its trained objects (the model, the generator ...): what JSON can hold."""
    def plain(value):
        try:
            json.dumps(value)
            return True
        except TypeError:
            return False
    return {k: v for k, v in summary.items() if plain(v)}


def sst2_text(out, max_examples=None):
    """SST-2's training sentences as plain text (the target domain's unlabelled corpus)."""
    from kerasplm.jobs.finetuning import read_classification_tsv

    texts, _, _ = read_classification_tsv(os.path.join(SST2, "train.tsv"), max_examples=max_examples)
    path = os.path.join(out, "sst2_text.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(texts) + "\n")
    return path


def general_lm(args, out, budget):
    from kerasplm.models.ulmfit.job import train_ulmfit_lm

    path = os.path.join(out, "general_lm")
    if "time_budget" in budget:   # the budget, not the job's default single epoch, ends the run
        budget = dict(budget, epochs=UNBOUNDED_EPOCHS)
    summary = train_ulmfit_lm(path, corpus=os.path.join(WT2, "wiki.valid.tokens"),
                              valid_corpus=os.path.join(WT2, "wiki.test.tokens"), preset=args.preset,
                              embedding_dim=args.embedding_dim, hidden_dim=args.hidden_dim,
                              max_chars=args.max_chars, seed=args.seed, verbose=0, **budget)
    return path, _quiet(summary)


def run_perplexity(args, out):
    budget = SMOKE if args.smoke else dict(time_budget=args.time_budget)
    _, summary = general_lm(args, out, budget)
    return {"wikitext2_test": summary}


def completed(run, train):
    """The summary of ``run`` (``metrics.json``) when an earlier invocation finished it, else ``train()``'s."""
    path = os.path.join(run, "metrics.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return {**json.load(f), "read_from": path}
    return _quiet(train())


def random_lm(out, target, text):
    """A language model of the ``target`` run's sizes, not trained (one step at a rate of 1e-12), whose vocabulary
    is the target text's: what the classifier without pretraining starts from."""
    from kerasplm.models.ulmfit.job import train_ulmfit_lm

    with open(os.path.join(target, "config.json"), encoding="utf-8") as f:
        sizes = json.load(f)["model"]["config"]["backbone"]["config"]
    path = os.path.join(out, "random_lm")
    completed(path, lambda: train_ulmfit_lm(path, corpus=text, embedding_dim=sizes["embedding_dim"],
                                            hidden_dim=sizes["hidden_dim"], num_layers=sizes["num_layers"], steps=1,
                                            learning_rate=1e-12, verbose=0))
    return path


def run_ablations(args, out):
    from kerasplm.models.ulmfit.job import finetune_ulmfit_classifier, finetune_ulmfit_lm

    budget = SMOKE if args.smoke else (dict(steps=args.lm_steps) if args.lm_steps else
                                       dict(time_budget=args.lm_budget))
    results = {}
    lm = args.lm
    if lm is None:
        lm = os.path.join(out, "general_lm")
        results["general_lm"] = completed(lm, lambda: general_lm(args, out, budget)[1])
    text = sst2_text(out, args.target_lm_examples)
    target = args.target_lm or os.path.join(out, "target_lm")
    results["target_lm"] = completed(target, lambda: finetune_ulmfit_lm(
        target, init=lm, corpus=text, seed=args.seed, verbose=0, **(SMOKE if args.smoke else dict(epochs=1))))
    inits = {"general": lm, "random": random_lm(out, target, text) if "no_pretraining" in args.variants else None}
    length = SMOKE if args.smoke else (dict(steps=args.steps) if args.steps else dict(epochs=args.epochs))
    for seed in range(args.seeds):   # seed by seed: an interrupted run has every variant's first seeds
        for name in args.variants:
            options = {"gradual_unfreezing": True, "init": target, **VARIANTS[name]}
            options["init"] = inits.get(options["init"], options["init"])
            run = os.path.join(out, f"{name}_{seed}")
            summary = completed(run, lambda: finetune_ulmfit_classifier(
                run, train=os.path.join(SST2, "train.tsv"), dev=os.path.join(SST2, "dev.tsv"),
                max_examples=args.max_examples, seed=seed, verbose=0, **options, **length))
            results.setdefault(name, {"runs": []})["runs"].append(_quiet(summary))
    for name in args.variants:
        accuracies = [run["dev"]["accuracy"] for run in results[name]["runs"]]
        results[name]["dev_accuracy_mean"] = statistics.mean(accuracies)
        results[name]["dev_accuracy_stdev"] = statistics.stdev(accuracies) if len(accuracies) > 1 else None
    return results


def run_compare(args, out):
    from kerasplm.models.bert.classifier_job import finetune_bert_classifier
    from kerasplm.models.bert.pretraining_job import train_bert
    from kerasplm.models.elmo.job import train_elmo
    from kerasplm.models.elmo.classifier_job import finetune_elmo_classifier
    from kerasplm.models.ulmfit.job import finetune_ulmfit_classifier, finetune_ulmfit_lm

    def share(fraction, epochs=False):
        """A stage's part of the budget; ``epochs``: a job whose --epochs would otherwise end it first."""
        if args.smoke:
            return SMOKE
        return dict(time_budget=args.budget * fraction, **(dict(epochs=UNBOUNDED_EPOCHS) if epochs else {}))

    sst2 = dict(train=os.path.join(SST2, "train.tsv"), dev=os.path.join(SST2, "dev.tsv"),
                max_examples=args.max_examples, seed=args.seed, verbose=0)
    corpus = os.path.join(WT2, "wiki.valid.tokens")
    results = {}
    lm = os.path.join(out, "general_lm")
    results["ulmfit_general_lm"] = completed(lm, lambda: general_lm(args, out, share(1 / 3))[1])
    target = os.path.join(out, "target_lm")
    results["ulmfit_target_lm"] = completed(target, lambda: finetune_ulmfit_lm(
        target, init=lm, corpus=sst2_text(out, args.target_lm_examples), seed=args.seed, verbose=0,
        **share(1 / 6, epochs=True)))
    rates = {} if args.discriminative_lr is None else dict(discriminative_lr=args.discriminative_lr)
    ulmfit = os.path.join(out, "ulmfit")
    results["ulmfit"] = completed(ulmfit, lambda: finetune_ulmfit_classifier(
        ulmfit, init=target, gradual_unfreezing=True, **rates, **sst2, **share(1 / 2, epochs=True)))
    elmo = os.path.join(out, "elmo")
    results["elmo_bilm"] = completed(elmo, lambda: train_elmo(elmo, corpus=corpus, preset=args.elmo_preset,
                                                              seed=args.seed, verbose=0, **share(1 / 2)))
    elmo_classifier = os.path.join(out, "elmo_classifier")
    results["elmo"] = completed(elmo_classifier, lambda: finetune_elmo_classifier(
        elmo_classifier, elmo=elmo, **sst2, **share(1 / 2)))
    bert = os.path.join(out, "bert")
    pretrain = dict(schedule_steps=args.bert_schedule_steps) if not args.smoke else {}
    results["bert_pretraining"] = completed(bert, lambda: train_bert(
        bert, corpus=corpus, preset=args.bert_preset, seed=args.seed, verbose=0, **pretrain, **share(1 / 2)))
    bert_classifier = os.path.join(out, "bert_classifier")
    results["bert"] = completed(bert_classifier, lambda: finetune_bert_classifier(
        bert_classifier, init=bert, pooling="mean", **sst2, **share(1 / 2, epochs=True)))
    results["dev_accuracy"] = {name: results[name]["dev"]["accuracy"] for name in ("ulmfit", "elmo", "bert")}
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("figure", choices=["perplexity", "ablations", "compare"])
    parser.add_argument("--smoke", action="store_true", help="two steps of every job (checks the script only)")
    parser.add_argument("--preset", default="awd_lstm", help="the AWD-LSTM preset")
    parser.add_argument("--embedding-dim", type=int, help="override the preset's embedding width (a smaller model "
                                                          "for the ablations in small)")
    parser.add_argument("--hidden-dim", type=int, help="override the preset's hidden LSTM width")
    parser.add_argument("--time-budget", type=float, default=1800.0, help="perplexity: seconds of LM training")
    parser.add_argument("--lm", help="ablations: a general ulmfit-lm run (default: train one for --lm-budget)")
    parser.add_argument("--lm-budget", type=float, default=1800.0)
    parser.add_argument("--lm-steps", type=int, help="ablations: train the general language model this many steps "
                                                     "instead of --lm-budget seconds (a figure machine load cannot "
                                                     "change)")
    parser.add_argument("--target-lm", help="ablations: a target ulmfit-lm run (finetune ulmfit-lm) to start from "
                                            "instead of fine-tuning --lm on SST-2's text")
    parser.add_argument("--variants", type=lambda v: v.split(","), default=list(VARIANTS),
                        help=f"ablations: comma-separated, of {','.join(VARIANTS)} (default: all)")
    parser.add_argument("--target-lm-examples", type=int, help="fine-tune the language model on at most this many "
                                                               "SST-2 training sentences (default: all of them)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=float, default=3.0, help="ablations: classifier epochs")
    parser.add_argument("--steps", type=int, help="ablations: classifier steps instead of epochs")
    parser.add_argument("--budget", type=float, default=3600.0, help="compare: seconds per method")
    parser.add_argument("--discriminative-lr", type=float, help="compare: the ULMFiT classifier's factor between "
                        "layer groups (default: the job's, the paper's 2.6)")
    parser.add_argument("--elmo-preset", default="elmo_mini")
    parser.add_argument("--bert-preset", default="bert_mini")
    parser.add_argument("--bert-schedule-steps", type=int, default=3000)
    parser.add_argument("--max-examples", type=int, help="read at most this many SST-2 training examples")
    parser.add_argument("--max-chars", type=int, help="read at most this many characters of WikiText-2")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="directory for the runs (default: a temporary one)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.variants) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    for path in (WT2, SST2):
        if not os.path.isdir(path):
            parser.error(f"no {path} (the corpora live in ../shared/data)")
    if args.smoke:
        args.preset, args.seeds, args.elmo_preset, args.bert_preset = "awd_lstm_tiny", 1, "elmo_tiny", "bert_tiny"
        args.max_examples, args.max_chars = args.max_examples or 64, args.max_chars or 20000
        args.target_lm_examples = args.target_lm_examples or 64
    out = args.out or tempfile.mkdtemp(prefix="bench_ulmfit_")
    os.makedirs(out, exist_ok=True)
    results = {"machine": machine_info(), "load_average_start": load_average(), "figure": args.figure,
               "arguments": vars(args)}
    results.update({"perplexity": run_perplexity, "ablations": run_ablations, "compare": run_compare}[args.figure](
        args, out))
    results["load_average_end"] = load_average()
    write_results(results, args.json)


if __name__ == "__main__":
    main()
