"""The run directory: one format for every model family, one loader.

A run directory holds everything needed to resume, evaluate, use and export a trained model::

    RUN_DIR/config.json     {"format_version": 3, "family": "bert_classifier", "task": "sequence_classification",
                             "preset": "bert_tiny",
                             "model": {...the task model's Keras config: class, backbone, head, labels...},
                             "preprocessor": {...the preprocessor's Keras config: tokenizer, lengths...} or null,
                             "options": {...the job's RUN options...},
                             "assets": {"vocab": "vocab.txt", ...}, "kerasplm_version": "0.x"}
    RUN_DIR/<assets>        tokenizer files (named relative to RUN_DIR in the configs and in ``assets``)
    RUN_DIR/checkpoints/    tf.train.CheckpointManager: ``model`` (the task model), optimizer, step, RNG state
    RUN_DIR/logs/           TensorBoard summaries
    RUN_DIR/history.json    the Trainer's history over every session of the run (dict of lists)
    RUN_DIR/metrics.json    the last session's evaluation summary
    RUN_DIR/.lock           held (``fcntl.flock``) by the job writing the run; names its pid, host and start time

``model`` and ``preprocessor`` are Keras object configs (:mod:`kerasplm.runs.serialization`), so :func:`load_run`
rebuilds any family's run the same way: deserialize the preprocessor and the task model, attach the preprocessor
(``model.preprocessor``), restore the checkpoint's ``model``. No family registers a loader.

``config.json`` is written once the run is known to be valid (options checked, data read, tokenizers and model
built), so its presence means "a run exists here"; the next job in the same directory resumes it, keeping its
stored options (see :func:`kerasplm.options.resolve_options`). JSON files are replaced atomically and created with
the same permissions as any other file the user creates (mode 0666 minus the umask). Every problem with a run file
is a :class:`RunDirError` (a ``ValueError``) whose one-line message names the file and what is wrong, which the CLI
prints with exit status 2. A job writing a run holds its lock (:meth:`RunDir.lock`) from before it reads
config.json until it ends: a second job on the same directory fails at once, naming the holder's pid and host.
The lock is the operating system's (``flock``), so it dies with its process: a lock file left by a killed job
blocks nothing. Runs of an earlier format (1 and 2: a family-specific ``model`` section) are refused
with one line naming the command that converts them (``kerasplm convert run``).
"""
import dataclasses
import datetime
import fcntl
import json
import os
import secrets
import socket
import time

import tensorflow as tf

import kerasplm
from kerasplm.runs.serialization import attach_preprocessor, deserialize, serialize
from kerasplm.training.checkpoints import restore_checkpoint

__all__ = ["FORMAT_VERSION", "RunDir", "RunDirError", "RunInfo", "attach_run_info", "load_run"]

FORMAT_VERSION = 3
_REQUIRED = {"family": str, "preset": str, "model": dict, "options": dict}
CONVERT_COMMAND = "kerasplm convert run --from {path} --out NEW_RUN_DIR"


class RunDirError(ValueError):
    """A missing or damaged run file; the message (one line) names it."""


def load_run(path, family=None, what=None):
    """The trained task model of any run directory, its preprocessor attached (``model.preprocessor``).

    ``family`` (a run family or a tuple of them): refuse runs of any other family, naming ``what`` was
    expected (e.g. "a translator run, written by kerasplm train translator").
    """
    run = RunDir(path)
    families = (family,) if isinstance(family, str) else family
    if not run.exists():
        expected = f"; expected {what or ' or '.join(families) + ' run'}" if families else ""
        raise RunDirError(f"{run.path} is not a kerasplm run directory (no config.json){expected}")
    config = run.read_config()
    if families and config["family"] not in families:
        raise run.error(run.CONFIG, f"a {config['family']} run, not {what or ' or '.join(families) + ' run'}")
    model = run.build(config)
    step = tf.Variable(0, dtype=tf.int64)
    run.restore(model=model, step=step)
    return attach_run_info(model, run.path, config, int(step.numpy()))


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """Where a loaded model comes from: its run directory, config.json and training step (export metadata)."""

    path: str
    config: dict
    step: int


def attach_run_info(model, path, config, step):
    """Set ``model.run_info`` (a :class:`RunInfo`, untracked: it is no part of the model's checkpoint)."""
    object.__setattr__(model, "run_info", RunInfo(os.fspath(path), config, step))
    return model


def upgrade_v1(config):
    """The translator's first format (data/train sections) as format 2."""
    data, train = config.get("data"), config.get("train")
    if not isinstance(data, dict) or not isinstance(train, dict):
        return config  # reported as missing/malformed keys by the caller
    options = {"data": data.get("path"), "src_col": data.get("src_col"), "tgt_col": data.get("tgt_col"),
               "max_length": data.get("max_length"), "preset": config.get("preset"), **train}
    upgraded = {k: v for k, v in config.items() if k not in ("data", "train")}
    upgraded.update(format_version=2, task="translation",
                    options={k: v for k, v in options.items() if v is not None or k == "data"},
                    assets={"source_vocab": "src_vocab.txt", "target_vocab": "tgt_vocab.txt"})
    return upgraded


class RunDir:
    """Paths and files of one run directory (see the module docstring)."""

    CONFIG, HISTORY, METRICS, LOCK = "config.json", "history.json", "metrics.json", ".lock"

    def __init__(self, path, writer=True):
        self.path = os.fspath(path)
        # False on the workers of a multi-worker job other than the chief: they read the run, and every write
        # (config, history, metrics) is the chief's.
        self.writer = writer
        self._lock_fd = None
        self._created_dir = self._created_lock = False

    # ------------------------------------------------------------------ the writer's lock
    def lock(self):
        """Take this run's lock (creating the directory), or raise a one-line :class:`RunDirError` naming the
        process that holds it (pid, host, start time). Held until :meth:`unlock` or the end of the process.

        ``flock`` on ``RUN_DIR/.lock``, non-blocking: the kernel drops it when its process ends however it ends
        (SIGKILL included), so a lock file left behind never blocks; the pid/host record in the file is only for
        the message. The lock counts only if the file locked is still the one at ``RUN_DIR/.lock`` (a job that
        failed before writing anything removes the file: :meth:`unlock`). A no-op when this process is not the
        run's writer.
        """
        if not self.writer or self._lock_fd is not None:
            return
        path = self.file(self.LOCK)
        while True:
            self._created_dir = not os.path.isdir(self.path)
            os.makedirs(self.path, exist_ok=True)
            self._created_lock = not os.path.exists(path)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)   # close-on-exec: children do not hold it
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if _same_file(fd, path):
                    break
                os.close(fd)   # locked a file that was removed meanwhile: lock the one there now
            except BlockingIOError:
                holder = _lock_holder(fd)
                os.close(fd)
                raise RunDirError(f"{self.path}: in use by another kerasplm job ({holder}); wait for it to end, "
                                  f"or give another --out") from None
            except BaseException:
                os.close(fd)
                raise
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": started}) + "\n"
        os.ftruncate(fd, 0)
        os.pwrite(fd, record.encode(), 0)
        self._lock_fd = fd

    def unlock(self):
        """Release the lock :meth:`lock` took. If the run directory holds nothing but the lock file (a job that
        failed before writing anything), the lock file goes, and the directory too if :meth:`lock` created it:
        a refused command leaves no trace. The removal happens while the lock is held, and :meth:`lock` checks
        that the file it locked is still in place, so no two jobs ever hold the run's lock at once."""
        if self._lock_fd is None:
            return
        fd, self._lock_fd = self._lock_fd, None
        try:
            if os.listdir(self.path) == [self.LOCK] and self._created_lock:
                os.unlink(self.file(self.LOCK))
                if self._created_dir:
                    os.rmdir(self.path)
        except OSError:   # someone else's files appeared, or the directory is not ours to tidy: keep it
            pass
        finally:
            os.close(fd)   # closing the last descriptor of the open file releases the flock

    def file(self, name):
        return os.path.join(self.path, name)

    @property
    def config_path(self):
        return self.file(self.CONFIG)

    @property
    def checkpoint_dir(self):
        return self.file("checkpoints")

    @property
    def log_dir(self):
        return self.file("logs")

    def exists(self):
        """True when a run was started here (its config.json exists)."""
        return os.path.isfile(self.config_path)

    def error(self, name, problem):
        """A RunDirError about file ``name`` of this run."""
        return RunDirError(f"{self.file(name)}: {problem}")

    # ------------------------------------------------------------------ writing
    def write_text(self, name, text):
        """Atomically replace ``name`` with ``text`` (UTF-8), mode 0666 minus the umask (a no-op when this
        process is not the run's writer)."""
        if not self.writer:
            return
        os.makedirs(self.path, exist_ok=True)
        target = self.file(name)
        tmp = os.path.join(os.path.dirname(target), f".tmp-{secrets.token_hex(6)}-{os.path.basename(target)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for open()
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise

    def write_json(self, name, payload):
        self.write_text(name, json.dumps(payload, indent=2, ensure_ascii=False) + "\n")

    def write_config(self, family, task, preset, model, options, assets=None, preprocessor=None):
        """Write config.json in the current format (call it once the run is known to be valid).

        ``model``: the task model (a Keras object; its config is stored) and ``preprocessor`` the object turning
        strings into its inputs (or None); ``assets``: ``{key: file name in the run directory}``.
        """
        config = {"format_version": FORMAT_VERSION, "family": family, "task": task, "preset": preset,
                  "model": serialize(model, self.path), "preprocessor": serialize(preprocessor, self.path),
                  "options": options, "assets": dict(assets or {}), "kerasplm_version": kerasplm.__version__}
        self.write_json(self.CONFIG, config)
        return config

    def update_options(self, config=None, **changes):
        """Rewrite config.json (``config``, default: the stored one) with ``changes`` to its options (a value known
        only once training started, such as a schedule length fitted to a time budget); returns the new config."""
        config = self.read_config() if config is None else config
        config = {**config, "options": {**config["options"], **changes}}
        self.write_json(self.CONFIG, config)
        return config

    # ------------------------------------------------------------------ reading
    def read_json(self, name, expected=dict):
        path = self.file(name)
        try:
            with open(path, encoding="utf-8") as f:
                payload = json.load(f)
        except FileNotFoundError:
            raise self.error(name, "missing") from None
        except UnicodeDecodeError as e:
            raise self.error(name, f"not UTF-8 text ({e.reason} at byte {e.start}); the file is damaged") from None
        except json.JSONDecodeError as e:
            raise self.error(name, f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); "
                                   f"the file is truncated or damaged") from None
        if not isinstance(payload, expected):
            raise self.error(name, f"expected a JSON {_json_type(expected)}, got {_json_type(type(payload))}")
        return payload

    def read_config(self, family=None, what="kerasplm", legacy=False):
        """config.json in the current format, its shape checked; ``family`` (a run family or a tuple of them; if
        given) must match.

        A run of an earlier format is refused with the command that converts it, unless ``legacy`` (the
        converter's own reading: format 1 is then returned as format 2).
        """
        if not os.path.isfile(self.config_path):
            raise RunDirError(f"{self.path} is not a {what} run directory (no config.json)")
        config = self.read_json(self.CONFIG)
        written = config.get("format_version", 1)
        if "format_version" not in config:
            config = upgrade_v1(config)
        version = config.get("format_version")
        if not isinstance(version, int) or isinstance(version, bool) or version > FORMAT_VERSION:
            raise self.error(self.CONFIG, f"format_version {version!r} is not one this kerasplm "
                                          f"({kerasplm.__version__}) reads (<= {FORMAT_VERSION}); upgrade kerasplm")
        if version < FORMAT_VERSION and not legacy:
            raise self.error(self.CONFIG, f"a run of format {written} (kerasplm "
                                          f"{config.get('kerasplm_version', '< 0.2')}); this kerasplm reads format "
                                          f"{FORMAT_VERSION}: convert it with "
                                          f"`{CONVERT_COMMAND.format(path=self.path)}`")
        for key, kind in _REQUIRED.items():
            if key not in config:
                raise self.error(self.CONFIG, f"missing key {key!r}")
            if not isinstance(config[key], kind):
                raise self.error(self.CONFIG, f"{key!r} must be a JSON {_json_type(kind)}, "
                                              f"got {_json_type(type(config[key]))}")
        if not isinstance(config.setdefault("assets", {}), dict):
            raise self.error(self.CONFIG, "'assets' must be a JSON object")
        families = (family,) if isinstance(family, str) else family
        if families and config["family"] not in families:
            raise self.error(self.CONFIG, f"a {config['family']} run, not a {' or '.join(families)} run")
        return config

    def build(self, config, preprocessor=None):
        """The task model and preprocessor ``config`` stores (no weights yet), the preprocessor attached to the model
        as ``model.preprocessor``; a one-line :class:`RunDirError` when either cannot be rebuilt, or when the model's
        ``check_preprocessor(preprocessor)`` (if it has one) finds they do not fit (a damaged vocabulary file).
        ``preprocessor``: one already rebuilt from this config, attached instead of a new one."""
        if preprocessor is None:
            try:
                preprocessor = deserialize(config.get("preprocessor"), self.path)
            except (ValueError, OSError) as e:
                raise self.error(self.CONFIG, f"'preprocessor' cannot be rebuilt ({e})") from None
        try:
            model = deserialize(config["model"], self.path)
        except (ValueError, OSError) as e:
            raise self.error(self.CONFIG, f"'model' cannot be rebuilt ({e})") from None
        if preprocessor is not None:
            check = getattr(model, "check_preprocessor", None)
            if check is not None:
                try:
                    check(preprocessor)
                except ValueError as e:   # a vocabulary of the wrong size: the message names the file
                    raise RunDirError(str(e)) from None
            attach_preprocessor(model, preprocessor)
        return model

    def asset(self, config, key):
        """Absolute path of asset ``key`` of ``config`` (an existing file)."""
        name = config["assets"].get(key)
        if not isinstance(name, str):
            raise self.error(self.CONFIG, f"'assets' has no file for {key!r}")
        if not os.path.isfile(self.file(name)):
            raise self.error(name, "missing")
        return self.file(name)

    def read_history(self):
        """history.json ({} when absent), checked to be a dict of lists."""
        if not os.path.exists(self.file(self.HISTORY)):
            return {}
        history = self.read_json(self.HISTORY)
        for key, values in history.items():
            if not isinstance(values, list):
                raise self.error(self.HISTORY, f"{key!r} must be a list, got {_json_type(type(values))}")
        return history

    def append_history(self, previous, segment, start_step):
        """Write history.json: ``previous`` (entries up to ``start_step``, where this session resumed)
        followed by this session's ``segment``; returns the merged history."""
        merged = _merge_history(previous, segment, start_step)
        self.write_json(self.HISTORY, merged)
        return merged

    # ------------------------------------------------------------------ checkpoints
    def latest_checkpoint(self):
        try:
            latest = tf.train.latest_checkpoint(self.checkpoint_dir)
        except Exception as e:  # a damaged 'checkpoint' state file
            raise self.error(os.path.join("checkpoints", "checkpoint"), f"unreadable ({e})") from e
        if latest is None:
            raise RunDirError(f"no checkpoint in {self.checkpoint_dir}: train first")
        return latest

    def restore(self, **objects):
        """Restore ``objects`` (model, step ...) from the latest checkpoint; returns its path."""
        latest = self.latest_checkpoint()
        restore_checkpoint(tf.train.Checkpoint(**objects), latest, partial=True)
        return latest


def _same_file(fd, path):
    """Whether the open file ``fd`` is the file now at ``path``."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (found.st_dev, found.st_ino)


def _lock_holder(fd, wait=1.0):
    """"pid P on HOST since T" from a held lock file's record; the holder writes it right after taking the lock,
    so an empty record is read again for up to ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        try:
            record = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
            return f"pid {record['pid']} on {record['host']} since {record['started']}"
        except (ValueError, KeyError, TypeError):
            if time.monotonic() >= deadline:
                return "a process that has not said which"
            time.sleep(0.05)


def _json_type(kind):
    return {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean",
            type(None): "null"}.get(kind, kind.__name__)


def _step_key(key, step_keys):
    """The step list a history key belongs to: the longest prefix P with a "Pstep" key."""
    prefixes = [k[:-len("step")] for k in step_keys if key.startswith(k[:-len("step")])]
    return max(prefixes, key=len) + "step" if prefixes else None


def _merge_history(previous, segment, start_step):
    step_keys = [k for k in set(previous) | set(segment) if k.endswith("step")]
    merged = {}
    for key in list(previous) + [k for k in segment if k not in previous]:
        owner = _step_key(key, step_keys)
        old = previous.get(key, [])
        if owner is not None and owner in previous:
            # Entries logged after the checkpoint this session resumed from were never kept.
            keep = sum(1 for s in previous[owner][:len(old)] if s <= start_step)
            old = old[:keep]
        merged[key] = list(old) + list(segment.get(key, []))
    return merged
