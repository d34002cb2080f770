"""The run directory (one format, one loader), job options, and the run-file items of issue 15."""
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kerasplm import cli, registry
from kerasplm.options import OptionsConflict, resolve_options
from kerasplm.runs import RunDir, RunDirError, load_run
from kerasplm.models.translator.job import TranslatorOptions, load_translator, train_translator

ROOT = Path(__file__).resolve().parents[2]
PAIRS = [("I am here.", "Estoy aquí."), ("You are here.", "Estás aquí."), ("He is tired.", "Él está cansado."),
         ("I am happy.", "Estoy feliz."), ("Go away.", "Vete."), ("Thanks.", "Gracias."), ("Hello!", "¡Hola!"),
         ("I see.", "Ya veo."), ("Come in.", "Pasa."), ("Be brief.", "Sé breve.")]
# No held-out BLEU (bleu_max_sentences=0): no test here reads the shared run's score, and it costs a decoder trace.
TINY = dict(preset="transformer_tiny", batch_size=4, vocab_size=120, warmup_steps=10, dev_size=2,
            bleu_max_sentences=0, verbose=0)


@pytest.fixture(scope="module")
def tsv(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "pairs.tsv"
    path.write_text("".join(f"{en}\t{es}\n" for en, es in PAIRS * 2), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def run2(tmp_path_factory, tsv):
    """A 2-step tiny run, shared: copy it before changing it."""
    out = str(tmp_path_factory.mktemp("run") / "run")
    train_translator(out, data=tsv, steps=2, log=lambda *_: None, **TINY)
    return out


def copy_run(run2, tmp_path, name="copy"):
    out = str(tmp_path / name)
    shutil.copytree(run2, out)
    return out


def cli_error(argv, capsys):
    """Runs the CLI in-process; returns its one-line error (asserting exit status 2 and one line)."""
    capsys.readouterr()
    try:
        code = cli.main(argv)
    except SystemExit as exit:  # argparse's errors
        code = exit.code
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    return err


# ---- item 8: every damaged run file is one line naming it, exit 2 (translate, export, resume) ----
def _truncate_checkpoint(out):
    ckpt = Path(out) / "checkpoints"
    (data,) = [p for p in ckpt.iterdir() if p.name.startswith("ckpt-2.data-")]
    data.write_bytes(data.read_bytes()[:64])
    return str(data), "truncated"


def _overwrite_checkpoint_data(out):
    """4 bytes of the data file overwritten: its checksum fails (TensorFlow's restore names the index)."""
    data = Path(out) / "checkpoints" / "ckpt-2.data-00000-of-00001"
    damaged = bytearray(data.read_bytes())
    damaged[1000:1004] = b"\xff\xff\xff\xff"
    data.write_bytes(bytes(damaged))
    return str(data), "Checksum does not match"


def _write_config(out, text):
    Path(out, "config.json").write_text(text, encoding="utf-8")
    return str(Path(out, "config.json"))


def _edit_config(out, edit):
    config = json.loads(Path(out, "config.json").read_text())
    edit(config)
    return _write_config(out, json.dumps(config))


DAMAGE = {
    "truncated checkpoint": _truncate_checkpoint,
    "overwritten checkpoint data": _overwrite_checkpoint_data,
    "truncated config": lambda out: (_write_config(out, Path(out, "config.json").read_text()[:40]),
                                     "not valid JSON"),
    "config without model": lambda out: (_edit_config(out, lambda c: c.pop("model")), "missing key 'model'"),
    "config of the wrong shape": lambda out: (_write_config(out, "[1, 2]"), "expected a JSON object, got array"),
    "model of the wrong shape": lambda out: (_edit_config(out, lambda c: c.update(model=[1])),
                                             "'model' must be a JSON object"),
    "model with unknown keys": lambda out: (_edit_config(out, lambda c: c["model"]["config"].update(colour=1)),
                                            "'model' cannot be rebuilt (Transformer: "),
    "model of an unknown class": lambda out: (_edit_config(out, lambda c: c["model"].update(class_name="Nope",
                                                                                          registered_name="x>Nope")),
                                              "'model' cannot be rebuilt"),
    "preprocessor from a foreign module": lambda out: (
        _edit_config(out, lambda c: c["preprocessor"].update(module="os", registered_name="os>system")),
        "'preprocessor' cannot be rebuilt"),
    "truncated vocabulary": lambda out: (Path(out, "src_vocab.txt").write_text("[PAD]\n[UNK]\n[START]\n[END]\n") and
                                         str(Path(out, "src_vocab.txt")), "4 tokens, but the model"),
    "vocabulary without the special tokens": lambda out: (Path(out, "tgt_vocab.txt").write_text("[PAD]\n[UNK]\nx\n")
                                                          and str(Path(out, "tgt_vocab.txt")), "lacks the translator's"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_run_files_are_one_line_errors(damage, run2, tsv, tmp_path, capsys):
    out = copy_run(run2, tmp_path)
    path, problem = DAMAGE[damage](out)
    commands = {
        "translate": ["translate", "--run", out, "Hola."],
        "export": ["export", "translator", "--run", out, "--to", str(tmp_path / "export")],
        "resume": ["train", "translator", "--out", out, "--data", tsv, "--steps", "3", "--quiet",
                   "--export-to", "none"],
    }
    if damage not in ("truncated checkpoint", "overwritten checkpoint data", "truncated config",
                      "truncated vocabulary"):
        del commands["resume"]  # the same loader; resuming costs a data pipeline each
    for name, argv in commands.items():
        err = cli_error(argv, capsys)
        assert path in err and problem in err, (name, err)
    assert not (tmp_path / "export").exists()


def test_damaged_checkpoint_data_is_one_line_in_a_real_process(run2, tsv, tmp_path):
    """No "WARNING:tensorflow:" flood of unrestored values when the interpreter exits after the error."""
    out = copy_run(run2, tmp_path)
    path, problem = _overwrite_checkpoint_data(out)
    proc = subprocess.run([sys.executable, "-m", "kerasplm.cli", "train", "translator", "--out", out, "--data", tsv,
                           "--steps", "3", "--quiet", "--export-to", "none"],
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"kerasplm: error: {path}: damaged checkpoint (") and problem in line, line
    assert ".index" not in line


def test_damaged_history_stops_a_resume_before_training(run2, tsv, tmp_path, capsys):
    out = copy_run(run2, tmp_path)
    Path(out, "history.json").write_text('{"step": [2], "loss": ', encoding="utf-8")
    err = cli_error(["train", "translator", "--out", out, "--steps", "3", "--export-to", "none"], capsys)
    assert os.path.join(out, "history.json") in err and "not valid JSON" in err
    assert load_translator(out).step == 2


def test_not_a_run_directory(tmp_path):
    with pytest.raises(RunDirError, match="is not a kerasplm run directory .*expected a translator run"):
        load_translator(str(tmp_path))
    with pytest.raises(RunDirError, match="is not a kerasplm run directory"):
        load_run(str(tmp_path))


# ---- item 9: config written only for a valid run; conflicting resumes refused ----
def test_failed_validation_leaves_no_config_and_the_next_preset_is_used(tsv, tmp_path, capsys):
    out = str(tmp_path / "run")
    err = cli_error(["train", "translator", "--data", tsv, "--out", out, "--max-length", "2", "--steps", "1"],
                    capsys)
    assert "--max-length: expected an integer >= 3, got '2'" in err
    # A failure after the options were accepted (an unreadable held-out corpus) leaves no config either.
    bad = tmp_path / "bad.tsv"
    bad.write_text("one column only\n", encoding="utf-8")
    err = cli_error(["train", "translator", "--data", tsv, "--dev-data", str(bad), "--out", out, "--steps", "1",
                     "--preset", "transformer_seed"], capsys)
    assert str(bad) in err
    # No config.json: the next job in this directory starts a new run with its own options.
    assert not os.path.exists(os.path.join(out, "config.json"))


def test_resume_with_conflicting_options_is_refused(run2, tsv, tmp_path, capsys):
    out = copy_run(run2, tmp_path)
    err = cli_error(["train", "translator", "--out", out, "--preset", "transformer_seed", "--vocab-size", "120",
                     "--batch-size", "8", "--steps", "3"], capsys)
    assert "preset='transformer_seed' (the run has 'transformer_tiny')" in err
    assert "batch_size=8 (the run has 4)" in err and "vocab_size" not in err
    assert "--out" in err and "start fresh" in err
    assert load_translator(out).step == 2
    run = RunDir(out)
    run.lock()   # the refused job released the run's lock (same process, another open file: flock tells)
    run.unlock()


# ---- item 10: SIGTERM exits right after the checkpoint; history spans every session ----
def test_sigterm_exits_after_the_checkpoint_without_bleu(tsv, tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kerasplm.cli", "train", "translator", "--data", tsv, "--out", str(out),
         "--preset", "transformer_tiny", "--batch-size", "4", "--vocab-size", "120", "--dev-size", "2",
         "--steps", "1000000", "--quiet", "--export-to", str(tmp_path / "export")],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Wait until the train metrics of step 50 reach the TensorBoard log: the loop is running.
        deadline = time.monotonic() + 300
        sizes = []
        while proc.poll() is None and time.monotonic() < deadline:
            logs = list((out / "logs").glob("events.*")) if (out / "logs").exists() else []
            sizes.append(logs[0].stat().st_size if logs else 0)
            if sizes[-1] and sizes[-1] > min(s for s in sizes if s):
                break
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        stdout, stderr = proc.communicate(timeout=120)
        elapsed = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert "stopped by SIGTERM" in stdout and "BLEU" not in stdout, stdout
    # A few steps, the checkpoint, the interpreter's exit: well inside Kubernetes' default 30 s grace period
    # even with the suite's other worker busy on the second core (18 s measured under `pytest -n 2`).
    assert elapsed < 25, elapsed
    step = load_translator(str(out)).step
    assert step >= 1
    assert not (tmp_path / "export").exists() and not (out / "metrics.json").exists()


# ---- item 11: label smoothing validated; a one-pair corpus names its file ----
@pytest.mark.parametrize("value", ["-3", "1", "nan"])
def test_label_smoothing_is_validated(value, capsys):
    err = cli_error(["train", "translator", "--label-smoothing", value, "--steps", "1"], capsys)
    expected = "a number >= 0 and < 1" if value != "nan" else "a finite value (a number >= 0 and < 1)"
    assert f"--label-smoothing: expected {expected}, got '{value}'" in err
    with pytest.raises(ValueError, match=f"option label_smoothing: expected {re.escape(expected)}"):
        TranslatorOptions(label_smoothing=float(value))


def test_single_pair_corpus_names_the_file(tmp_path, capsys):
    data = tmp_path / "one.tsv"
    data.write_text("Hello.\tHola.\n", encoding="utf-8")
    out = tmp_path / "run"
    err = cli_error(["train", "translator", "--data", str(data), "--out", str(out), "--steps", "1"], capsys)
    assert str(data) in err and "1 distinct source sentence" in err and "--dev-data" in err
    assert not (out / "config.json").exists()


# ---- item 12: one permission rule for every run file ----
def test_run_files_follow_the_umask(run2):
    umask = os.umask(0)
    os.umask(umask)
    modes = {name: os.stat(os.path.join(run2, name)).st_mode & 0o777
             for name in ("config.json", "history.json", "metrics.json", "src_vocab.txt", "tgt_vocab.txt")}
    assert set(modes.values()) == {0o666 & ~umask}, modes
    previous = os.umask(0o027)
    try:
        RunDir(run2).write_json("extra.json", {})
    finally:
        os.umask(previous)
    assert os.stat(os.path.join(run2, "extra.json")).st_mode & 0o777 == 0o640


# ---- the format: stored Keras configs, one loader; older formats refused in one line, then converted ----
def test_config_format_and_load_run(run2, tsv):
    config = json.loads(Path(run2, "config.json").read_text())
    assert config["format_version"] == 3 and config["family"] == "transformer_translator"
    assert config["task"] == "translation" and config["preset"] == "transformer_tiny"
    assert config["assets"] == {"source_vocab": "src_vocab.txt", "target_vocab": "tgt_vocab.txt"}
    assert config["options"]["data"] == os.path.abspath(tsv) and config["options"]["batch_size"] == 4
    assert "steps" not in config["options"] and "verbose" not in config["options"]
    # The task model's and the preprocessor's Keras configs; the vocabularies named relative to the run.
    assert config["model"]["registered_name"] == "kerasplm>Transformer"
    assert config["model"]["config"]["d_model"] == 32 and config["model"]["config"]["name"] == "transformer_tiny"
    preprocessor = config["preprocessor"]
    assert preprocessor["registered_name"] == "kerasplm>TranslatorPreprocessor"
    assert preprocessor["config"]["src_tokenizer"]["config"]["vocabulary"] == "src_vocab.txt"
    assert preprocessor["config"]["tgt_tokenizer"]["config"]["vocabulary"] == "tgt_vocab.txt"
    model = load_run(run2)
    assert type(model).__name__ == "Transformer" and model.run_info.step == 2
    assert model.preprocessor.src_tokenizer.vocab_size == config["model"]["config"]["input_vocab_size"]
    assert load_translator(run2).step == 2


def test_a_moved_run_directory_still_loads(run2, tmp_path):
    """Assets are named relative to the run: a copy elsewhere reads its own files (the original is gone)."""
    moved = str(tmp_path / "elsewhere" / "run")
    shutil.copytree(run2, moved)
    expected = load_translator(run2).translate(["Hola."])
    hidden = str(tmp_path / "hidden")
    os.rename(run2, hidden)
    try:
        assert load_translator(moved).translate(["Hola."]) == expected
    finally:
        os.rename(hidden, run2)


def test_a_run_written_before_the_family_folders_loads(run2, tmp_path):
    """config.json names the module of each class; runs written when the Transformer lived in
    ``kerasplm.models.transformer`` (a module then, a folder now) load through the manifests' FORMER_MODULES, and
    resume rewrites nothing but what a resume always rewrites."""
    old = copy_run(run2, tmp_path, "old")
    path = os.path.join(old, "config.json")
    text = open(path, encoding="utf-8").read()
    assert '"module": "kerasplm.models.transformer.model"' in text
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace('"module": "kerasplm.models.transformer.model"', '"module": "kerasplm.models.transformer"'))
    assert load_translator(old).translate(["Hola."]) == load_translator(run2).translate(["Hola."])


def test_every_former_module_names_a_module_that_exists():
    moved = registry.former_modules()
    assert {"kerasplm.models.bert", "kerasplm.models.bert_tasks", "kerasplm.text.gpt_inputs",
            "kerasplm.models.awd_lstm", "kerasplm.models.elmo_classifier"} <= set(moved)
    for old, new in moved.items():
        assert importlib.util.find_spec(new) is not None, (old, new)


def _old_config(new, version):
    """The config.json the translator wrote in run format ``version`` (1 or 2) for the same run."""
    o = new["options"]
    model = {k: v for k, v in new["model"]["config"].items() if k not in ("name", "trainable")}
    if version == 2:
        return {"format_version": 2, "family": new["family"], "task": "translation", "preset": new["preset"],
                "model": model, "options": o, "assets": new["assets"], "kerasplm_version": "0.1.0"}
    return {"family": "transformer_translator", "preset": new["preset"], "model": model,
            "data": {"path": o["data"], "src_col": o["src_col"], "tgt_col": o["tgt_col"], "max_length": o["max_length"]},
            "train": {k: o[k] for k in ("batch_size", "warmup_steps", "label_smoothing", "seed", "vocab_size")},
            "kerasplm_version": "0.1.0"}


@pytest.mark.parametrize("version", [1, 2])
def test_older_formats_are_refused_in_one_line_and_convert(version, run2, tmp_path, capsys):
    out = copy_run(run2, tmp_path)
    new_config = json.loads(Path(out, "config.json").read_text())
    Path(out, "config.json").write_text(json.dumps(_old_config(new_config, version)), encoding="utf-8")
    err = cli_error(["translate", "--run", out, "Hola."], capsys)
    assert f"a run of format {version}" in err and f"kerasplm convert run --from {out} --out NEW_RUN_DIR" in err
    converted = str(tmp_path / "converted")
    assert cli.main(["convert", "run", "--from", out, "--out", converted]) == 0
    assert capsys.readouterr().out.strip() == converted
    assert json.loads(Path(out, "config.json").read_text())["model"] == _old_config(new_config, version)["model"]
    config = json.loads(Path(converted, "config.json").read_text())
    assert config["format_version"] == 3 and config["model"]["config"] == new_config["model"]["config"]
    assert config["preprocessor"] == new_config["preprocessor"]
    assert not Path(converted, ".lock").exists()   # a lock file belongs to its directory's jobs
    assert sorted(os.listdir(Path(converted, "checkpoints"))) == sorted(os.listdir(Path(run2, "checkpoints")))
    assert load_translator(converted).translate(["Hola.", "Hace frío."]) == \
        load_translator(run2).translate(["Hola.", "Hace frío."])
    # A second conversion into the same place, or of a current run, is refused in one line.
    assert "is not an empty directory" in cli_error(["convert", "run", "--from", out, "--out", converted], capsys)
    assert "already run format 3" in cli_error(["convert", "run", "--from", converted, "--out",
                                                str(tmp_path / "again")], capsys)


def test_a_converted_format_1_run_resumes_with_the_whole_history(run2, tmp_path):
    """The first format's run, converted, resumes; history.json then spans both sessions."""
    out = copy_run(run2, tmp_path)
    new_config = json.loads(Path(out, "config.json").read_text())
    Path(out, "config.json").write_text(json.dumps(_old_config(new_config, 1)), encoding="utf-8")
    converted = str(tmp_path / "converted")
    assert cli.main(["convert", "run", "--from", out, "--out", converted]) == 0
    assert load_translator(converted).step == 2
    with pytest.raises(OptionsConflict, match=r"batch_size=8 \(the run has 4\)"):
        train_translator(converted, steps=4, batch_size=8, log=lambda *_: None)
    assert json.loads(Path(converted, "history.json").read_text())["step"] == [2]
    summary = train_translator(converted, steps=4, log=lambda *_: None, verbose=0, bleu_max_sentences=1)
    assert summary["step"] == 4
    assert summary["schedule"]["name"] == "seed"      # trained before --schedule existed: it keeps the seed's
    history = json.loads(Path(converted, "history.json").read_text())
    assert history["step"] == [2, 4] and history["eval_step"] == [2, 4]
    assert len(history["loss"]) == len(history["learning_rate"]) == 2


# ---- options ----
def test_bundled_data_options_share_one_held_out_split():
    from kerasplm.models.translator.job import _prepare_data

    (all_src, _), _, dev = _prepare_data(TranslatorOptions(bundled_data="all"))
    (sample_src, _), _, sample_dev = _prepare_data(TranslatorOptions(bundled_data="sample"))
    assert (len(all_src), len(sample_src)) == (115703, 20000) and dev == sample_dev and len(dev[0]) == 500
    assert not set(dev[0]) & set(all_src)
    # max_pairs caps the bundled training pairs too (their first ones); the held-out split stays whole.
    (capped_src, _), _, capped_dev = _prepare_data(TranslatorOptions(bundled_data="sample", max_pairs=1000))
    assert capped_src == sample_src[:1000] and capped_dev == sample_dev


def test_bundled_data_defaults_to_the_whole_corpus_with_a_capped_vocabulary_sample():
    from kerasplm.models.translator.job import BUNDLED_VOCAB_MAX_SENTENCES, _vocab_max_sentences

    assert TranslatorOptions().bundled_data == "all"  # the measured default (issue 10, RESULTS.md)
    assert _vocab_max_sentences(TranslatorOptions()) == BUNDLED_VOCAB_MAX_SENTENCES == 30_000
    assert _vocab_max_sentences(TranslatorOptions(data=__file__)) == 0  # a user's corpus: every sentence
    assert _vocab_max_sentences(TranslatorOptions(vocab_max_sentences=5)) == 5


def test_options_api():
    assert TranslatorOptions().preset == "transformer_quick"  # the measured default (issue 10, RESULTS.md)
    with pytest.raises(TypeError, match="unknown option.*colour"):
        TranslatorOptions().replace(colour=1)
    with pytest.raises(ValueError, match="option preset: expected one of"):
        TranslatorOptions(preset="transformer_huge")
    with pytest.raises(ValueError, match="src_col and tgt_col are both 1"):
        TranslatorOptions(tgt_col=1)
    base = TranslatorOptions(batch_size=8)
    resolved, explicit = resolve_options(TranslatorOptions, base, {"steps": 5})
    assert explicit == {"batch_size", "steps"} and (resolved.batch_size, resolved.steps) == (8, 5)
    # Resuming: options not given take the stored values; RUN options only are compared.
    resolved, _ = resolve_options(TranslatorOptions, None, {"steps": 9, "mixed_precision": "mixed_bfloat16"},
                                  stored={"preset": "transformer_tiny", "vocab_size": 120})
    assert (resolved.preset, resolved.vocab_size, resolved.steps) == ("transformer_tiny", 120, 9)


# ---- one writer per run directory: an flock that dies with its process ----
TOY_ENV = dict(os.environ, PYTHONPATH=str(ROOT), KERASPLM_FAMILIES="tests.toy_family.manifest")


def _train_toy(out, *args, **popen):
    argv = [sys.executable, "-m", "kerasplm.cli", "train", "toy", "--out", str(out), *args]
    if popen:
        return subprocess.Popen(argv, cwd=ROOT, env=TOY_ENV, text=True, **popen)
    return subprocess.run(argv, cwd=ROOT, env=TOY_ENV, capture_output=True, text=True, timeout=300)


def test_run_lock_names_its_holder_and_is_released(run2, tmp_path):
    path = str(tmp_path / "run")
    first, second = RunDir(path), RunDir(path)
    first.lock()
    holder = rf"\(pid {os.getpid()} on {re.escape(socket.gethostname())} since \d{{4}}-\d\d-\d\dT"
    with pytest.raises(RunDirError, match=rf"^{re.escape(path)}: in use by another kerasplm job {holder}"):
        second.lock()
    RunDir(path, writer=False).lock()   # a multi-worker job's other workers take no lock
    first.unlock()
    second.lock()
    second.unlock()
    # The module's run was trained in this process: its job released the lock when it ended.
    trained = RunDir(run2)
    trained.lock()
    trained.unlock()
    assert json.loads(Path(run2, ".lock").read_text())["pid"] == os.getpid()


def test_a_second_job_on_a_run_fails_at_once_and_a_killed_holder_blocks_nothing(tmp_path):
    out = tmp_path / "run"
    first = _train_toy(out, "--steps", "1000000", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while first.poll() is None and time.monotonic() < deadline:
            if (out / ".lock").exists() and f'"pid": {first.pid}' in (out / ".lock").read_text():
                break
            time.sleep(0.05)
        assert first.poll() is None, first.communicate()[1][-3000:]
        # Another RUN option: without the lock both jobs would find no config.json and train their own run.
        second = _train_toy(out, "--steps", "5", "--max-chars", "5")
        assert second.returncode == 2, second.stderr[-3000:]
        (line,) = second.stderr.splitlines()
        assert line.startswith(f"kerasplm: error: {out}: in use by another kerasplm job (pid {first.pid} on "
                               f"{socket.gethostname()} since "), line
        assert first.poll() is None   # the holder goes on
    finally:
        first.kill()
        first.communicate()
    # SIGKILL left the lock file and its record; the kernel released the flock with the process.
    assert f'"pid": {first.pid}' in (out / ".lock").read_text()
    resumed = _train_toy(out, "--steps", "5")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    step = int(re.search(rf"wrote {re.escape(str(out))}: step (\d+)", resumed.stdout).group(1))
    again = _train_toy(out, "--steps", str(step + 5))   # the normal end released it: the next job resumes
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"wrote {out}: step {step + 5}" in again.stdout


def test_a_refused_job_leaves_no_trace(tmp_path, capsys):
    """A job refused before it writes anything removes its lock file, and the directory the lock created."""
    from kerasplm import cli

    out = tmp_path / "new" / "run"
    assert cli.main(["train", "translator", "--preset", "transformer_huge", "--out", str(out)]) == 2
    assert "option preset: expected one of" in capsys.readouterr().err
    assert not out.exists() and (tmp_path / "new").exists()   # makedirs' parents stay; the run directory goes
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["train", "translator", "--preset", "transformer_huge", "--out", str(empty)]) == 2
    assert empty.is_dir() and not any(empty.iterdir())         # the user's directory stays, without the lock


def test_a_lock_taken_on_a_removed_lock_file_is_taken_again(tmp_path, monkeypatch):
    """The race the removal opens: job B opens .lock, job A (failed, nothing written) removes it and the directory
    and releases its flock, B's flock then succeeds on the removed file. B must notice and lock the file that is
    at the path now, so that a third job is refused."""
    from kerasplm.runs import run_dir

    path = str(tmp_path / "run")
    first, second = RunDir(path), RunDir(path)
    first.lock()
    real_flock, interleaved = run_dir.fcntl.flock, []

    def flock(fd, operation):
        if not interleaved:
            interleaved.append(fd)
            first.unlock()
            assert not os.path.exists(path)
        return real_flock(fd, operation)

    monkeypatch.setattr(run_dir.fcntl, "flock", flock)
    second.lock()
    monkeypatch.setattr(run_dir.fcntl, "flock", real_flock)
    assert os.path.exists(os.path.join(path, ".lock")) and interleaved
    with pytest.raises(RunDirError, match="in use by another kerasplm job"):
        RunDir(path).lock()
    second.unlock()
    assert not os.path.exists(path)
