"""Training core shared by every model family: schedules, masked losses/metrics, the Trainer loop,
and tf.distribute helpers."""
from kerasplm.training.distribute import configure_logical_cpus, get_strategy
from kerasplm.training.losses import (
    MaskedAccuracy,
    MaskedSparseCategoricalCrossentropy,
    loss_function,
    masked_accuracy,
    masked_accuracy_counts,
    masked_sparse_cross_entropy,
    fused_masked_cross_entropy,
)
from kerasplm.training.schedules import (
    BudgetSchedule,
    CustomSchedule,
    ScaledSchedule,
    SlantedTriangular,
    WarmupCosineDecay,
    WarmupLinearDecay,
    plot_schedule,
)
from kerasplm.training.trainer import Trainer

__all__ = [
    "CustomSchedule",
    "BudgetSchedule",
    "WarmupLinearDecay",
    "WarmupCosineDecay",
    "SlantedTriangular",
    "ScaledSchedule",
    "plot_schedule",
    "masked_sparse_cross_entropy",
    "fused_masked_cross_entropy",
    "loss_function",
    "masked_accuracy",
    "masked_accuracy_counts",
    "MaskedSparseCategoricalCrossentropy",
    "MaskedAccuracy",
    "Trainer",
    "get_strategy",
    "configure_logical_cpus",
]
