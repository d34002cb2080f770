"""The ELMo tests' toys: the biLM job's corpus words and options (ELMO_TINY); the classifier job's sentiment rows,
their TSV writer and options (CLASSIFIER_TINY); and a tiny bilm-tf model in bilm-tf's own files (options.json and an
HDF5 file of known random weights) for the conversion tests. The legacy-run and export tests make their runs from
them too."""
import json
import random

import numpy as np
import pytest

# ---- the biLM job (tests/models/elmo/test_job.py)
WORDS = "the a cat dog sat ran on under mat log big small red old".split()
ELMO_TINY = dict(preset="elmo_tiny", vocab_size=12, num_sampled=6, window=8, batch_size=4, verbose=0, seed=3)


# ---- the classifier job (tests/models/elmo/test_classifier_job.py)
GOOD, BAD, FILLER = ["good", "great", "fine"], ["bad", "awful", "poor"], ["the", "movie", "was", "a", "plot", "very"]
CLASSIFIER_TINY = dict(embedding_dim=8, lstm_units=8, max_length=8, batch_size=8, verbose=0, seed=2, dropout=0.1)


def toy_rows(n, seed):
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.randrange(2)
        words = rng.sample(GOOD if label else BAD, 2) + rng.sample(FILLER, rng.randrange(1, 4))
        rng.shuffle(words)
        rows.append((" ".join(words), label))
    return rows


def write_tsv(path, rows):
    path.write_text("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows))
    return str(path)


# ---- bilm-tf's files (tests/models/elmo/test_convert.py)
FILTERS = [[1, 4], [2, 3], [3, 2]]
MAX_CHARS, CHAR_DIM, U, P = 12, 4, 6, 5
OPTIONS = {"bidirectional": True,
           "char_cnn": {"activation": "relu", "embedding": {"dim": CHAR_DIM}, "filters": FILTERS, "n_highway": 2,
                        "max_characters_per_token": MAX_CHARS, "n_characters": 262},
           "lstm": {"cell_clip": 1.5, "dim": U, "n_layers": 2, "proj_clip": 0.8, "projection_dim": P,
                    "use_skip_connections": True}}


def bilm_tf_arrays(seed=0):
    rng = np.random.default_rng(seed)
    f = sum(n for _, n in FILTERS)
    a = {"char_embed": rng.uniform(-1, 1, (261, CHAR_DIM))}
    for i, (w, n) in enumerate(FILTERS):
        a[f"CNN/W_cnn_{i}"] = rng.normal(0, 0.5, (1, w, CHAR_DIM, n))
        a[f"CNN/b_cnn_{i}"] = rng.normal(0, 0.1, (n,))
    for k in range(2):
        for part in ("carry", "transform"):
            a[f"CNN_high_{k}/W_{part}"] = rng.normal(0, 0.5, (f, f))
            a[f"CNN_high_{k}/b_{part}"] = rng.normal(0, 0.5, (f,))
    a["CNN_proj/W_proj"], a["CNN_proj/b_proj"] = rng.normal(0, 0.5, (f, P)), rng.normal(0, 0.1, (P,))
    for d in range(2):
        for layer in range(2):
            root = f"RNN_{d}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            a[f"{root}/W_0"] = rng.normal(0, 0.7, (P + P, 4 * U))
            a[f"{root}/B"] = rng.normal(0, 0.3, (4 * U,))
            a[f"{root}/W_P_0"] = rng.normal(0, 0.7, (U, P))
    return {k: v.astype(np.float32) for k, v in a.items()}


def write_files(root, arrays, options=OPTIONS):
    """bilm-tf's three files of ``arrays`` in ``root``: ``(options.json, weights.hdf5, vocab.txt)`` (the test skips
    without h5py)."""
    h5py = pytest.importorskip("h5py")
    with h5py.File(root / "weights.hdf5", "w") as f:
        for name, value in arrays.items():
            f.create_dataset(name, data=value)
    (root / "options.json").write_text(json.dumps(options))
    (root / "vocab.txt").write_text("</S>\n<S>\n<UNK>\nthe\ncat\n")
    return str(root / "options.json"), str(root / "weights.hdf5"), str(root / "vocab.txt")

