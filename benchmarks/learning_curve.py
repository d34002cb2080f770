"""The learning curve of a kerasplm run directory, from its ``history.json`` (every family's jobs write one).

    python -m benchmarks.learning_curve RUN_DIR [--png FILE] [--keys eval_loss eval_perplexity ...]

Prints a Markdown table (one row per held-out evaluation, with the training loss logged at or just before
that step) for ``benchmarks/RESULTS.md``, and with ``--png`` plots the training loss and every ``eval_*``
curve against the step. A perplexity column is added as exp(loss) where the history has none (the language
models' losses are mean natural-log cross-entropies per predicted token; for BERT, of the MLM term alone).
"""
import argparse
import math

from kerasplm.runs import RunDir


def _at_or_before(steps, values, step):
    """The last value logged at a step <= ``step`` (None when there is none)."""
    best = None
    for s, v in zip(steps, values):
        if s <= step:
            best = v
    return best


def curve_rows(history, keys=None):
    """[(step, {column: value})] at each held-out evaluation step."""
    eval_steps = history.get("eval_step") or []
    keys = keys or sorted(k for k in history if k.startswith("eval_") and k != "eval_step")
    rows = []
    for i, step in enumerate(eval_steps):
        row = {"train_loss": _at_or_before(history.get("step", []), history.get("loss", []), step)}
        for k in keys:
            if k in history and i < len(history[k]):
                row[k] = history[k][i]
        lm_loss = "eval_mlm_loss" if "eval_mlm_loss" in row else "eval_loss"  # BERT: the MLM term alone
        if lm_loss in row and not any("perplexity" in k for k in row):
            row[f"{lm_loss.replace('loss', 'perplexity')} (exp)"] = math.exp(min(row[lm_loss], 50.0))
        rows.append((step, row))
    return rows


def _columns(rows):
    """Every column of ``rows``, in first-seen order."""
    return list(dict.fromkeys(k for _, row in rows for k in row))


def markdown(rows):
    columns = _columns(rows)
    lines = ["| step | " + " | ".join(columns) + " |", "|---:|" + "---:|" * len(columns)]
    for step, row in rows:
        cells = ["" if row.get(c) is None else f"{row[c]:.4g}" for c in columns]
        lines.append(f"| {step:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(history, rows, path, title=None):
    """Three panels: training and held-out loss; held-out accuracies (0-1); held-out perplexity (log)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = _columns(rows)
    panels = [[c for c in columns if "accuracy" in c], [c for c in columns if "perplexity" in c]]
    panels = [p for p in panels if p]
    fig, axes = plt.subplots(1, 1 + len(panels), figsize=(5 * (1 + len(panels)), 3.6), squeeze=False)
    ax = axes[0][0]
    ax.plot(history.get("step", []), history.get("loss", []), label="training loss (window mean)")
    if "eval_loss" in history:
        ax.plot(history["eval_step"], history["eval_loss"], "o-", label="held-out loss")
    ax.set_xlabel("step"), ax.set_ylabel("loss"), ax.legend(), ax.grid(alpha=0.3)
    for ax, panel in zip(axes[0][1:], panels):
        for c in panel:
            ax.plot([s for s, r in rows if c in r], [r[c] for _, r in rows if c in r], "o-", label=c)
        if "perplexity" in panel[0]:
            ax.set_yscale("log")
        else:
            ax.set_ylim(0, 1)
        ax.set_xlabel("step"), ax.legend(), ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--png", help="write the plot here")
    parser.add_argument("--title")
    parser.add_argument("--keys", nargs="+", help="eval_* columns to show (default: all)")
    args = parser.parse_args(argv)
    history = RunDir(args.run_dir).read_history()  # {} when absent; a damaged file names itself
    rows = curve_rows(history, args.keys)
    if not rows:
        raise SystemExit(f"{args.run_dir}/history.json has no held-out evaluations (eval_step)")
    print(markdown(rows))
    if args.png:
        plot(history, rows, args.png, args.title)
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
