"""The PNGs: Figure 1 (toy) and Figure 2 (test curves per data set) in the
paper's style. matplotlib with the Agg backend: no display needed."""

from __future__ import annotations

import math

import numpy as np

TOY_COLOURS = {"scinol2": "tab:red", "scinol1": "tab:orange", "sgd": "tab:blue", "adagrad": "tab:green",
               "adam": "tab:purple", "nag": "tab:brown"}
TOOL_STYLE = {"scinol-stream": "-", "vw": "--", "river": ":"}
# One colour per family of contenders.families(), the same in every figure
# whichever tools are installed; ScInOL2 red and thick throughout.
FAMILY_COLOURS = {"ScInOL2": "tab:red", "ScInOL1": "tab:orange", "Alg1-K17 (kotlowski1)": "goldenrod",
                  "SGD (best lr)": "tab:blue", "AdaGrad (best lr)": "tab:green", "Adam (best lr)": "tab:purple",
                  "NAG (best lr)": "tab:brown", "VW default": "dimgray", "VW --coin": "black",
                  "VW best -l": "tab:pink", "River LogReg default": "tab:cyan",
                  "River StandardScaler+LogReg": "tab:olive", "River LogReg best optimizer": "teal"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def toy_figure(result, path: str) -> None:
    """Figure 1: (a) every method at every learning rate, log scale; (b) the
    band between the optimal and the zero model, linear scale."""
    from pipelines.bench.toy import LABELS

    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    x = result.iterations
    for ax, log in zip(axes, (True, False)):
        seen = set()
        for (algo, lr), runs in result.curves.items():
            mean = np.nanmean(runs, axis=0)
            free = lr is None
            label = LABELS[algo] if algo not in seen else None
            seen.add(algo)
            ax.plot(x, mean, color=TOY_COLOURS[algo], lw=2.2 if free else 1.0, alpha=1.0 if free else 0.7,
                    label=label, zorder=3 if free else 2)
        for level, name in ((result.optimal, "optimal model u"), (result.zero, "zero model (ln 2)")):
            ax.axhline(level, color="k", ls="--", lw=1.0)
            ax.annotate(name, (x[-1], level), textcoords="offset points", xytext=(-4, 3), ha="right",
                        fontsize=8)
        ax.set_xlabel("iteration")
        ax.set_ylabel("average test cross-entropy")
        if log:
            ax.set_yscale("log")
            ax.set_title("(a) all learning rates, log scale")
        else:
            gap = result.zero - result.optimal
            ax.set_ylim(result.optimal - 0.15 * gap, result.zero + 0.15 * gap)
            ax.set_title("(b) between the optimal and the zero model")
    axes[0].legend(loc="upper right", fontsize=8)
    grid = ", ".join(f"{v:g}" for v in result.grid)
    fig.suptitle(f"Kempka et al. 2019 §4.1 toy data: mean of {result.runs} training sets of {result.n_train:,}, "
                 f"test set {result.n_test:,}; SGD/AdaGrad/Adam/NAG at lr ∈ {{{grid}}}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _limits(results, ref, what: str, n_classes: int) -> tuple[float, float]:
    """Zoom on where the curves that matter are, as the paper's Figure 2 does:
    from the best curve to a few times ScInOL2's distance from it (never past
    the uniform prediction); curves wholly outside are listed, not drawn."""
    means = [r.curve(what)[0] for r in results]
    if what == "test_loss":
        lo, ref_hi = min(float(m.min()) for m in means), float(ref.curve(what)[0].max())
        top = min(1.05 * math.log(n_classes), lo + 4 * max(ref_hi - lo, 0.01 * lo + 1e-3))
        return max(0.0, lo - 0.05 * (top - lo)), top
    hi, ref_lo = max(float(m.max()) for m in means), float(ref.curve(what)[0].min())
    bottom = max(0.0, hi - 4 * max(hi - ref_lo, 0.005))
    return bottom, min(1.0, hi + 0.1 * (hi - bottom))


def datasets_figure(per_dataset: list, path: str, what: str = "test_loss") -> None:
    """Figure 2 style: one panel per data set, mean ± std over runs after each
    pass (from the first, as the paper plots); tuned methods at their best."""
    plt = _pyplot()
    n = len(per_dataset)
    rows = math.ceil(n / 4)  # at most 4 panels a row, rows filled evenly
    cols = math.ceil(n / rows)
    fig, axes = plt.subplots(rows, cols, figsize=(max(4.2 * cols, 9.0), 3.4 * rows + 1.0), squeeze=False)
    labels = [r.family.label for r in per_dataset[0][1]]
    colours = {label: FAMILY_COLOURS.get(label, "tab:gray") for label in labels}
    styles = {r.family.label: TOOL_STYLE[r.family.tool] for r in per_dataset[0][1]}
    for ax, (data, results) in zip(axes.flat, per_dataset):
        epochs = np.arange(1, len(results[0].runs[0].test_loss) + 1)
        ref = next(r for r in results if r.family.label == "ScInOL2")
        off = []
        bottom, top = _limits(results, ref, what, data.n_classes)
        if what == "test_loss":
            ax.axhline(math.log(data.n_classes), color="k", ls="--", lw=0.8)
        for r in results:
            label = r.family.label
            mean, std = r.curve(what)
            if (what == "test_loss" and mean.min() > top) or (what != "test_loss" and mean.max() < bottom):
                off.append(label)
                continue
            ax.plot(epochs, mean, styles[label], color=colours[label], lw=2.4 if label == "ScInOL2" else 1.3,
                    marker="o" if len(epochs) <= 3 else None, ms=3, zorder=3 if label == "ScInOL2" else 2)
            ax.fill_between(epochs, mean - std, mean + std, color=colours[label], alpha=0.15, lw=0)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylim(bottom, top)
        ax.set_title(f"{data.name} ({data.source}; {len(data.y_train):,} train, K={data.n_classes})", fontsize=9)
        ax.set_xlabel("epoch")
        ax.set_ylabel("test cross-entropy" if what == "test_loss" else "test accuracy")
        if off:
            ax.text(0.02, 0.98, "off the chart: " + ", ".join(off), transform=ax.transAxes, fontsize=6,
                    va="top", wrap=True)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], ls=styles[lb], color=colours[lb], lw=2.4 if lb == "ScInOL2" else 1.3) for lb in labels]
    fig.legend(handles, labels, loc="lower center", ncol=min(5, len(labels)), fontsize=8)
    kind = "cross-entropy (dashed: uniform prediction, ln K)" if what == "test_loss" else "accuracy"
    fig.suptitle(f"Test {kind} after each pass, mean ± std over runs;\n"
                 f"tuned methods at their best learning rate, chosen on the test set", fontsize=10)
    fig.tight_layout(rect=(0, 1.0 / (3.4 * rows + 1.0), 1, 0.94))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def ratio_figure(verdicts, path: str, competitor_margin: float, zero_margin: float) -> None:
    """The one-pass targets: each learner's progressive loss over the best
    untuned competitor's (a) and over the zero model's (b), per data set,
    with the target drawn as a dashed line."""
    plt = _pyplot()
    sets = list(dict.fromkeys(v.data for v in verdicts))
    learners = list(dict.fromkeys(v.learner for v in verdicts))
    ratio = {(v.data, v.learner): (v.vs_competitor, v.vs_zero) for v in verdicts}
    fig, axes = plt.subplots(2, 1, figsize=(max(8.0, 0.9 * len(sets) + 3), 8), sharex=True)
    width = 0.8 / max(1, len(learners))
    x = np.arange(len(sets))
    for i, (ax, margin, title) in enumerate(zip(axes, (competitor_margin, zero_margin),
                                                ("(a) over the best untuned competitor (VW, River)",
                                                 "(b) over the zero model (ln K)"))):
        for j, learner in enumerate(learners):
            values = np.array([ratio.get((d, learner), (np.nan, np.nan))[i] for d in sets])
            # bars start at 1 (as good as the reference): up is worse, down is better
            bars = ax.bar(x + (j - (len(learners) - 1) / 2) * width, np.nan_to_num(values - 1.0, nan=0.0), width,
                          bottom=1.0, color=FAMILY_COLOURS.get(learner, f"C{j}"), label=learner)
            for bar, value in zip(bars, values):
                if np.isfinite(value):
                    ax.annotate(f"{value:.3f}", (bar.get_x() + bar.get_width() / 2, value), ha="center",
                                va="bottom" if value >= 1 else "top", fontsize=7)
        ax.axhline(margin, color="k", ls="--", lw=1.0)
        ax.axhline(1.0, color="gray", lw=0.8)
        finite = [r[i] for r in ratio.values() if np.isfinite(r[i])]
        lo, hi = min([0.8, *finite]), max([margin, *finite])
        ax.set_ylim(lo - 0.08 * (hi - lo), hi + 0.08 * (hi - lo))  # room for the value labels
        ax.set_ylabel("progressive loss ratio")
        ax.set_title(f"{title}; target ≤ {margin:g}", fontsize=10)
    axes[0].legend(fontsize=8)
    axes[-1].set_xticks(x, sets, rotation=30, ha="right")
    fig.suptitle("One pass, untuned: progressive loss ratios (lower is better)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
