"""The greedy token of a tied-embedding LM, ``argmax_v h · E_v`` over a float32 ``(V, H)`` table, without
reading the whole float32 table every step.

At a few rows per step decoding is bound by reading weights, and the tied output table is the largest of them
(GPT-2: 50,257 × 768 floats). XLA:CPU's float32 dot with 2–4 rows reads it at about half the memory
bandwidth, while its bfloat16 dot with float32 accumulation reads half the bytes and runs about 1.7× faster
(benchmarks/RESULTS.md, issue 13). With one row the float32 matrix-vector kernel is already near the
bandwidth limit, so the engine screens from two rows on. A bfloat16 product is not the float32 one, so it only *screens*:

1. screen: ``s = bf16(h) · bf16(E)ᵀ`` accumulated in float32, for the whole vocabulary ``(n, V)``;
2. the vocabulary is cut into chunks of ``chunk`` consecutive ids; the ``chunks`` chunks with the highest
   screen maxima are re-scored in float32 from the table's own rows: ``z_v = h · E_v``;
3. certificate: every screen value is within ``bound`` of the float32 logit,
   ``|s_v − z_v| ≤ c_H · ‖E_v‖ · ‖h‖`` (Cauchy–Schwarz on the rounding error ``Σ_i |E_vi h_i|``, with
   ``c_H = (2u + u²)(1 + γ_H) + 2γ_H``, ``u = 2⁻⁸`` bfloat16's unit roundoff and ``γ_H = H·2⁻²⁴ / (1 −
   H·2⁻²⁴)`` float32 accumulation in any order, Higham's bound, counted for both products). So a token
   outside the re-scored chunks has ``z_v ≤ r + bound`` where ``r`` is the largest screen value outside
   them. If the best re-scored logit beats ``r + bound`` it is the argmax of the float32 logits;
4. otherwise (a near tie the screen cannot settle, or a non-finite value) that step falls back to the
   full float32 logits, for the whole batch.

Step 1 needs XLA (plain TensorFlow has no bfloat16 × bfloat16 → float32 matmul on CPU), so the engine uses the
screen in XLA-compiled generation only.

The result equals ``argmax`` of the float32 logits except between logits equal up to float32 rounding
(the re-scored dot sums in another order than the full one; candidates are kept in id order so exact ties
still go to the lowest id). Used by :func:`kerasplm.generation.engine.causal_lm_search` for greedy decoding.
"""
import tensorflow as tf

NEG_INF = float("-inf")
BF16_UNIT_ROUNDOFF = 2.0 ** -8
# bfloat16's products flush subnormals to zero (AVX512-BF16); each term then errs by at most 2^-126 absolute.
SUBNORMAL_SLACK = 2.0 ** -120


def rounding_constant(hidden_size):
    """``c_H`` of the module docstring: ``|s_v − z_v| ≤ c_H ‖E_v‖ ‖h‖`` for hidden size ``H``."""
    gamma = hidden_size * 2.0 ** -24 / (1.0 - hidden_size * 2.0 ** -24)
    u = BF16_UNIT_ROUNDOFF
    return (2 * u + u * u) * (1 + gamma) + 2 * gamma


class ScreenedArgmax:
    """``fn(hidden float32 (n, H)) -> int32 (n,)``: the greedy token of ``hidden · tableᵀ`` (see the module).

    Args:
      table: float32 ``(V, H)`` tied output embedding (read once here: its bfloat16 copy, padded to whole
        chunks, and its largest row norm are made when the object is built, i.e. once per traced call).
      exclude_id: an id never chosen (the padding id); negative: none.
      chunk, chunks: the screen re-scores ``chunks`` chunks of ``chunk`` ids per row (4 × 32 by default:
        the fastest in a probe on a GPT-2-shaped model; no fallback in 96 steps of a random-weight model).
    """

    def __init__(self, table, exclude_id=-1, chunk=32, chunks=4):
        table = tf.convert_to_tensor(table)
        vocab_size, hidden_size = table.shape
        self.table, self.chunk = table, chunk
        self.num_chunks = -(-vocab_size // chunk)
        self.chunks = min(chunks, self.num_chunks)
        padded = self.num_chunks * chunk
        self.table16 = tf.pad(tf.cast(table, tf.bfloat16), [[0, padded - vocab_size], [0, 0]])
        ids = tf.range(padded)
        excluded = (ids >= vocab_size) | tf.equal(ids, exclude_id)
        self.bias = tf.where(excluded, NEG_INF, 0.0)                  # (padded,) -inf: never chosen
        self.vocab_size = vocab_size
        # (1 + 2^-10): room for the float32 rounding of the norms and of this product themselves.
        self.scale = rounding_constant(hidden_size) * (1 + 2.0 ** -10) * tf.reduce_max(tf.norm(table, axis=1))
        self.slack = hidden_size * SUBNORMAL_SLACK

    def bound(self, hidden):
        """float32 ``(n,)``: ``c_H · max_v ‖E_v‖ · ‖h‖`` (+ the subnormal slack), the screen's largest error."""
        return self.scale * tf.norm(hidden, axis=-1) + self.slack

    def full_argmax(self, hidden):
        """The plain path: float32 logits for the whole vocabulary."""
        logits = tf.matmul(hidden, self.table, transpose_b=True) + self.bias[:self.vocab_size]
        return tf.argmax(logits, axis=-1, output_type=tf.int32)

    def scores(self, hidden):
        """float32 ``(n, V rounded up to whole chunks)``: the screen ``bf16(h) · bf16(E)ᵀ``, -inf at excluded ids."""
        # bfloat16 x bfloat16 -> float32 has an XLA kernel only (no plain TensorFlow one on CPU).
        return tf.linalg.matmul(tf.cast(hidden, tf.bfloat16), self.table16, transpose_b=True,
                                output_type=tf.float32) + self.bias

    def screen(self, hidden):
        """-> ``(token int32 (n,), certified bool scalar)``: the best re-scored id of each row, and whether the
        certificate holds for every row (then those ids are the float32 argmaxes)."""
        hidden = tf.cast(hidden, tf.float32)
        n = tf.shape(hidden)[0]
        chunk_max = tf.reduce_max(tf.reshape(self.scores(hidden), [n, self.num_chunks, self.chunk]), axis=-1)
        _, best_chunks = tf.math.top_k(chunk_max, k=self.chunks)                       # (n, chunks)
        best_chunks = tf.sort(best_chunks, axis=-1)                                  # candidates in id order
        chosen = tf.reduce_any(tf.equal(tf.range(self.num_chunks)[tf.newaxis, :, tf.newaxis],
                                        best_chunks[:, tf.newaxis, :]), axis=-1)     # (n, num_chunks)
        rest = tf.reduce_max(tf.where(chosen, NEG_INF, chunk_max), axis=-1)          # r: best screen value left
        ids = tf.reshape(best_chunks[:, :, tf.newaxis] * self.chunk + tf.range(self.chunk), [n, -1])
        rows = tf.gather(self.table, tf.minimum(ids, self.vocab_size - 1))           # (n, chunks·chunk, H)
        logits = tf.einsum("nkh,nh->nk", rows, hidden) + tf.gather(self.bias, ids)
        token = tf.gather(ids, tf.argmax(logits, axis=-1, output_type=tf.int32), batch_dims=1)
        certified = tf.reduce_all(tf.reduce_max(logits, axis=-1) > rest + self.bound(hidden))  # False for NaN
        return token, certified

    def __call__(self, hidden):
        """int32 ``(n,)``: the float32 argmax of ``hidden (n, H) · tableᵀ`` (XLA-compiled callers only)."""
        token, certified = self.screen(hidden)
        return tf.cond(certified, lambda: token, lambda: self.full_argmax(tf.cast(hidden, tf.float32)))
