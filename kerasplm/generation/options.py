"""The decoding options of kerasplm, declared once: their defaults and their validation.

Two spellings of the same options:

* **the engine's** (:func:`kerasplm.generation.generate`, ``make_generate_fn``, ``make_translate_fn``,
  ``run_search``): an explicit ``strategy`` and its options: "greedy"; "sample" with ``temperature`` > 0,
  ``top_k`` (None: no top-k filter), ``top_p`` (None: no nucleus) and a ``seed``; "beam" with
  ``beam_size`` and ``alpha`` (GNMT length penalty). :func:`validate_options` checks them.
* **a request's** (``TextGenerator.generate``, ``kerasplm generate``, the generator export's ``generate``
  signature): no strategy, and 0 means "off" (the default) for every option: ``temperature`` 0 = greedy
  (> 0: sampling), ``top_k`` 0 (or None) = no top-k filter (as is a ``top_k`` >= the vocabulary),
  ``top_p`` 0 or 1 (or None) = no nucleus, ``num_beams`` 1 = no beam search. :func:`resolve_request` turns
  Python values into the engine's strategy and options. Scalar tensors (a SavedModel signature's inputs)
  are checked by :func:`request_checks` and go to the engine as they are: its sampler
  (:func:`kerasplm.generation.sampling.make_sampler`) and ``causal_lm_search`` apply the same rules at run
  time, so a request decodes the same tokens whichever way it comes.
"""
import numbers

import tensorflow as tf

from kerasplm.options import DEFAULT_MAX_NEW_TOKENS, DecodingRequestOptions

STRATEGIES = ("greedy", "sample", "beam")
DEFAULT_STRATEGY = "greedy"
DEFAULT_TEMPERATURE = 1.0        # the engine's sampling temperature (a request's default is 0: greedy)
DEFAULT_BEAM_SIZE = 4
DEFAULT_ALPHA = 0.6              # GNMT length penalty exponent (Wu et al., 2016)
# A request's defaults: the declaration of ``kerasplm generate``'s options (kerasplm.options.DecodingRequestOptions);
# max_new_tokens None = DEFAULT_MAX_NEW_TOKENS, or what the model's context leaves (max_new_tokens_for).
REQUEST_DEFAULTS = DecodingRequestOptions.defaults()
DEFAULT_SEED = REQUEST_DEFAULTS["seed"]


def max_new_tokens_for(max_new_tokens, max_positions):
    """A request's ``max_new_tokens``: as given, or (None) :data:`DEFAULT_MAX_NEW_TOKENS` capped at what a model of
    ``max_positions`` positions can generate after a one-token prompt."""
    return min(DEFAULT_MAX_NEW_TOKENS, max_positions - 1) if max_new_tokens is None else max_new_tokens

# A request's rules, one message each (Python ValueErrors and the SavedModel's InvalidArgumentErrors).
TEMPERATURE_RULE = "temperature must be >= 0 (0 = greedy)"
TOP_K_RULE = "top_k must be >= 0 (0 = no top-k filter)"
TOP_P_RULE = "top_p must be in [0, 1] (0 = no nucleus)"


def validate_sampling(temperature=DEFAULT_TEMPERATURE, top_k=None, top_p=None):
    """Raises ValueError naming the bad sampling option (the engine's spelling). Tensor-valued options are
    a request's (0 = off): :func:`request_checks` checks them, in graph."""
    if not tf.is_tensor(temperature) and not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not tf.is_tensor(top_k) and top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be a positive integer or None, got {top_k!r}")
    if not tf.is_tensor(top_p) and top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1] or None, got {top_p}")


def validate_options(strategy=DEFAULT_STRATEGY, temperature=DEFAULT_TEMPERATURE, top_k=None, top_p=None,
                     beam_size=DEFAULT_BEAM_SIZE, alpha=DEFAULT_ALPHA, vocab_size=None):
    """Raises ValueError naming the first bad decoding option (the engine's spelling)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; expected one of {STRATEGIES}")
    validate_sampling(temperature, top_k, top_p)
    if strategy == "beam":
        if not isinstance(beam_size, int) or beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {beam_size}")
        if vocab_size is not None and 2 * beam_size > vocab_size:
            raise ValueError(f"beam_size={beam_size} needs target_vocab_size >= {2 * beam_size}")
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")


def resolve_request(temperature=0.0, top_k=None, top_p=None, num_beams=1):
    """A request's options (Python values, 0 = off) -> ``(strategy, options)`` for the engine.

    Raises ValueError naming the bad option, or a combination in which one would be ignored (top-k / top-p
    without a temperature, sampling options with beam search).
    """
    def number(value, kind):
        return isinstance(value, kind) and not isinstance(value, bool)

    if not number(temperature, numbers.Real) or not temperature >= 0:
        raise ValueError(f"{TEMPERATURE_RULE}, got {temperature!r}")
    if top_k is not None and (not number(top_k, numbers.Integral) or top_k < 0):
        raise ValueError(f"{TOP_K_RULE}, got {top_k!r}")
    if top_p is not None and (not number(top_p, numbers.Real) or not 0.0 <= top_p <= 1.0):
        raise ValueError(f"{TOP_P_RULE}, got {top_p!r}")
    if not number(num_beams, numbers.Integral) or num_beams < 1:
        raise ValueError(f"num_beams must be a positive integer (1 = no beam search), got {num_beams!r}")
    temperature = float(temperature)
    top_k = int(top_k) if top_k else None                    # 0: no filter
    top_p = float(top_p) if top_p and top_p < 1.0 else None  # 0 or 1: no nucleus
    num_beams = int(num_beams)
    if num_beams > 1:
        if temperature or top_k or top_p:
            raise ValueError("beam search (num_beams > 1) takes no sampling option (temperature, top_k, top_p)")
        return "beam", {"beam_size": num_beams}
    if temperature > 0:
        return "sample", {"temperature": temperature, "top_k": top_k, "top_p": top_p}
    if top_k or top_p:
        raise ValueError("top_k and top_p need sampling: give a temperature > 0")
    return "greedy", {}


def request_checks(temperature, top_k, top_p):
    """A request's rules for tensors (a signature's inputs; scalars or one value per row): the assert ops, for
    ``tf.control_dependencies`` (an InvalidArgumentError naming the option)."""
    return [
        # NaN fails every comparison below; infinity passes >= 0 and would turn the logits into NaN.
        tf.debugging.assert_less(temperature, tf.fill(tf.shape(temperature), float("inf")),
                                 message="temperature must be finite"),
        tf.debugging.assert_greater_equal(temperature, tf.zeros_like(temperature), message=TEMPERATURE_RULE),
        tf.debugging.assert_greater_equal(top_k, tf.zeros_like(top_k), message=TOP_K_RULE),
        tf.debugging.assert_greater_equal(top_p, tf.zeros_like(top_p), message=TOP_P_RULE),
        tf.debugging.assert_less_equal(top_p, tf.ones_like(top_p), message=TOP_P_RULE),
    ]


def map_option_groups(fn, rows, options, output_dtypes):
    """Run ``fn`` once per distinct combination of per-row options, in graph: a request's options as the batch-safe
    signatures of the exports take them (:mod:`kerasplm.models.translator.export`, :mod:`kerasplm.models.gpt.export`).

    TF Serving's request batching concatenates the inputs of concurrent requests along their 0th dimension, so
    a signature is batch-safe only when every input has one row per example; an option is then a per-row vector,
    and one merged batch may hold rows of different options. Decoding takes its options as scalars (one beam
    size, one temperature for the whole search), so the rows are grouped by their options and each group is
    decoded on its own; a batch whose rows agree (the usual case) runs as one group.

    Args:
      fn: ``fn(rows_of_group: list, options_of_group: list) -> {name: tensor [n]}``: ``rows_of_group`` are the
        ``rows`` tensors gathered to the group's n rows (in batch order), ``options_of_group`` the options as
        scalars.
      rows: tensors ``[B, ...]`` passed per row (prompts, per-row caps, seeds...).
      options: int32 / float32 tensors ``[B]`` that must be scalars for ``fn`` (rows are grouped by them; floats
        compare by their bits).
      output_dtypes: ``{name: dtype}`` of ``fn``'s outputs, each of shape ``[n]``.
    Returns ``{name: tensor [B]}``: each row's output, in the batch's order.
    """
    keys = tf.stack([o if o.dtype == tf.int32 else tf.bitcast(tf.cast(o, tf.float32), tf.int32) for o in options],
                    axis=1)
    _, group_of_row = tf.raw_ops.UniqueV2(x=keys, axis=tf.constant([0], tf.int64), out_idx=tf.int32)
    num_groups = tf.reduce_max(tf.concat([group_of_row, [-1]], axis=0)) + 1

    def body(group, row_ids, outputs):
        members = tf.cast(tf.where(tf.equal(group_of_row, group))[:, 0], tf.int32)
        result = fn([tf.gather(x, members) for x in rows], [tf.gather(o, members[0]) for o in options])
        return (group + 1, row_ids.write(group, members),
                {name: outputs[name].write(group, tf.ensure_shape(result[name], [None])) for name in outputs})

    def array(dtype):
        return tf.TensorArray(dtype, size=num_groups, infer_shape=False, element_shape=[None])

    _, row_ids, outputs = tf.while_loop(
        lambda group, *_: group < num_groups, body,
        (tf.constant(0), array(tf.int32), {name: array(dtype) for name, dtype in output_dtypes.items()}))
    order = row_ids.concat()
    return {name: tf.dynamic_stitch([order], [outputs[name].concat()]) for name in output_dtypes}
