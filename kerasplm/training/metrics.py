"""Exact figures of a classifier over a whole evaluation set (not means of per-batch values), shared by every
family's classification jobs (BERT, GPT-1, ELMo, ULMFiT, Sentence-BERT's NLI head).

* :func:`classification_metrics`: accuracy, F1 (binary, or macro over classes) and Matthews' correlation
  coefficient of integer predictions.
"""
import numpy as np

__all__ = ["classification_metrics"]


def classification_metrics(labels, predictions, num_labels):
    """Exact accuracy, F1 and Matthews' correlation of integer ``predictions`` against ``labels``.

    F1 is that of class 1 for two classes (GLUE's), else the macro average over classes (a class absent
    from both gives F1 0 and is skipped). MCC is the multi-class R_K statistic (Gorodkin 2004), which for two
    classes is (TP·TN − FP·FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)); 0 when a denominator is 0.
    Returns ``{"accuracy", "f1", "mcc", "examples"}``.
    """
    labels, predictions = np.asarray(labels, np.int64), np.asarray(predictions, np.int64)
    if labels.shape != predictions.shape or labels.ndim != 1:
        raise ValueError(f"labels and predictions must be vectors of one length, got {labels.shape} and "
                         f"{predictions.shape}")
    n = len(labels)
    confusion = np.zeros((num_labels, num_labels), np.float64)   # rows: true class, columns: predicted
    np.add.at(confusion, (labels, predictions), 1.0)
    true_positives = np.diag(confusion)
    predicted, actual = confusion.sum(axis=0), confusion.sum(axis=1)

    def f1(c):
        denominator = predicted[c] + actual[c]
        return 2.0 * true_positives[c] / denominator if denominator else 0.0

    if num_labels == 2:
        f1_value = f1(1)
    else:
        present = [c for c in range(num_labels) if predicted[c] + actual[c]]
        f1_value = float(np.mean([f1(c) for c in present])) if present else 0.0
    correct = true_positives.sum()
    covariance = correct * n - float(predicted @ actual)
    denominator = np.sqrt((n * n - float(predicted @ predicted)) * (n * n - float(actual @ actual)))
    return {"accuracy": float(correct / n) if n else 0.0, "f1": float(f1_value),
            "mcc": float(covariance / denominator) if denominator else 0.0, "examples": int(n)}
