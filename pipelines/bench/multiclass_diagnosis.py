"""Diagnosis of the multiclass (softmax) learners: ScInOL2/ScInOL1/kotlowski1
as shipped, against variants of the multiclass extension and one-vs-rest.

``python -m pipelines.bench.multiclass_diagnosis`` prints, for iris, wine and
digits (scikit-learn's copies, raw features, all rows, one pass, the mean of
3 shuffles, bias on): the progressive error and loss of each variant; then
the held-out accuracy on iris after 10 passes over the 2/3 training split.

The variants are slow numpy loops written for this comparison (a few
thousand examples each); the shipped learners run their compiled kernels.

- ``scinol2``: Kempka et al. 2019, Algorithm 2 on each (coordinate, class)
  weight with g_k = ∂ℓ/∂ŷ_k: G, S², η per (coordinate, class), M per
  coordinate (what the learner does).
- ``shared-S2``: S² per coordinate, Σ_k (g_k x)², shared by the classes.
- ``ovr``: one-vs-rest, K binary logistic ScInOL2 learners, argmax score;
  the loss reported is the log loss of the normalised sigmoids.
- ``centered``: the features shifted to mean 0 over the whole set (uses the
  data in advance: not an online method, it shows what the offset costs);
  ``running mean``: each row minus the mean of the rows so far (online).
- ``eps=10``: ScInOL2 with ten times the initial wealth ε (the paper sets
  ε = 1 and says it only affects the constants).
- ``VW --oaa``: Vowpal Wabbit one-against-all, logistic loss, its default
  updates or ``--coin``, as the same-run baseline (needs the vowpalwabbit
  package).
- ``kotlowski1``: Kotłowski 2017, Algorithm 1, whose weights carry the
  factor 1/(α t d); ``dim=1`` and ``dim=0.001`` make that factor larger
  (d = 1, d = 0.001) to show what the factor costs and buys.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from learners import make_learner
from pipelines.bench.datasets import load_bundled
from pipelines.bench.optional import have, missing_message

SETS = ("iris", "wine", "digits")


def softmax_grad(scores: np.ndarray, label: int) -> tuple[float, np.ndarray]:
    top = scores.max()
    e = np.exp(scores - top)
    z = e.sum()
    g = e / z
    g[label] -= 1.0
    return float(math.log(z) + top - scores[label]), g


class NumpyScInOL2:
    """ScInOL2 over (coordinate, output) weights; ``shared_s2`` sums S² over
    the outputs per coordinate. x includes the bias column."""

    def __init__(self, d: int, k: int, shared_s2: bool = False, eps: float = 1.0):
        self.G = np.zeros((d, k))
        self.S2 = np.zeros((d, k))
        self.eta = np.full((d, k), eps)
        self.M = np.zeros(d)
        self.shared = shared_s2

    def weights(self, x: np.ndarray) -> np.ndarray:
        m = np.maximum(self.M, np.abs(x))[:, None]
        s2 = self.S2.sum(1, keepdims=True) if self.shared else self.S2
        root = np.sqrt(s2 + m * m)
        with np.errstate(invalid="ignore", divide="ignore"):
            theta = np.where(root > 0, self.G / root, 0.0)
            return np.where(root > 0, np.clip(theta, -1, 1) * self.eta / (2 * root), 0.0)

    def update(self, x: np.ndarray, w: np.ndarray, g: np.ndarray) -> None:
        self.M = np.maximum(self.M, np.abs(x))
        gx = x[:, None] * g[None, :]
        self.eta -= gx * w
        self.G -= gx
        self.S2 += gx * gx


def logistic(score: float, y: float) -> tuple[float, float]:
    m = y * score
    return float(np.logaddexp(0.0, -m)), float(-y / (1.0 + math.exp(m)) if m < 700 else 0.0)


def run_numpy(kind: str, X: np.ndarray, y: np.ndarray, k: int, model=None):
    """One pass; (model, errors, losses). ``kind``: scinol2, shared-S2, ovr."""
    Xb = np.hstack([np.ones((len(y), 1)), X])
    if model is None:
        model = NumpyScInOL2(Xb.shape[1], k, shared_s2=kind == "shared-S2")
    errs, losses = np.empty(len(y)), np.empty(len(y))
    for i, (x, c) in enumerate(zip(Xb, y.astype(int))):
        w = model.weights(x)
        s = x @ w
        errs[i] = s.argmax() != c
        if kind == "ovr":
            signs = np.where(np.arange(k) == c, 1.0, -1.0)
            g = np.array([logistic(s[j], signs[j])[1] for j in range(k)])
            p = 1.0 / (1.0 + np.exp(-s))
            losses[i] = -math.log(max(p[c] / p.sum(), 1e-300))
        else:
            losses[i], g = softmax_grad(s, c)
        model.update(x, w, g)
    return model, errs, losses


def predict_numpy(model, X: np.ndarray) -> np.ndarray:
    Xb = np.hstack([np.ones((len(X), 1)), X])
    return np.array([(x @ model.weights(x)).argmax() for x in Xb])


def run_kernel(algo: str, X, y, k, params, model=None):
    model = model or make_learner(algo, "softmax", n_classes=k, **params)
    scores, losses = model.learn(X, y.astype(float), return_losses=True)
    return model, scores.argmax(1) != y, losses


def run_vw(extra: list, X, y, k, model=None):
    """Vowpal Wabbit ``--oaa K --probabilities`` (logistic loss, its default
    adaptive, normalised, invariant updates unless ``extra`` says otherwise),
    one example at a time, predicting before learning; the same-run baseline."""
    from vowpalwabbit import Workspace

    from pipelines.bench.contenders import vw_features

    ws = model or Workspace(arg_list=["--quiet", "--loss_function", "logistic", "--oaa", str(k),
                                      "--probabilities", *extra])
    errs, losses = np.empty(len(y)), np.empty(len(y))
    for i, (feats, c) in enumerate(zip(vw_features(X), y.astype(int))):
        ex = ws.parse(f"{c + 1} {feats}")
        ws.learn(ex)
        p = np.asarray(ex.get_scalars())
        ws.finish_example(ex)
        errs[i], losses[i] = p.argmax() != c, -math.log(max(p[c], 1e-15))
    return ws, errs, losses


VARIANTS = [
    ("ScInOL2 (per-class S², shipped)", "kernel", "scinol2", {}),
    ("ScInOL2 numpy per-class S²", "numpy", "scinol2", {}),
    ("ScInOL2 shared S²", "numpy", "shared-S2", {}),
    ("ScInOL2 one-vs-rest", "numpy", "ovr", {}),
    ("ScInOL2 eps=10 (initial wealth ×10)", "kernel", "scinol2", {"eps": 10.0}),
    ("ScInOL1", "kernel", "scinol1", {}),
    ("kotlowski1 (1/(α t d), shipped)", "kernel", "kotlowski1", {}),
    ("kotlowski1 dim=1", "kernel", "kotlowski1", {"dim": 1.0}),
    ("kotlowski1 dim=0.001 (1000/(α t))", "kernel", "kotlowski1", {"dim": 0.001}),
]
MIXTURE = [("scinol-mix (its default experts)", "kernel", "scinol-mix", {})]
BASELINES = [("VW --oaa (default updates)", "vw", [], {}), ("VW --oaa --coin", "vw", ["--coin"], {})]
CENTRED = VARIANTS[:4] + VARIANTS[6:7]


def run_variant(spec, X, y, k, model=None):
    _, where, what, params = spec
    if where == "vw":
        return run_vw(what, X, y, k, model)
    if where == "kernel":
        return run_kernel(what, X, y, k, params, model)
    return run_numpy(what, X, y, k, model)


def running_centred(X: np.ndarray) -> np.ndarray:
    """Row t minus the mean of rows 1..t: what an online learner can know
    when it sees row t (the first row becomes 0)."""
    return X - np.cumsum(X, axis=0) / np.arange(1, len(X) + 1)[:, None]


def progressive(name: str, variants, centered: bool = False, shuffles: int = 3, running: bool = False) -> list[tuple]:
    d = load_bundled(name)
    X = np.vstack([d.X_train, d.X_test])
    y = np.concatenate([d.y_train, d.y_test])
    if centered:
        X = X - X.mean(0)
    rows = []
    for spec in variants:
        errs, losses = [], []
        for s in range(shuffles):
            order = np.random.default_rng(s).permutation(len(y))
            Xo = running_centred(X[order]) if running else X[order]
            _, e, l = run_variant(spec, Xo, y[order], d.n_classes)
            errs.append(e.mean())
            losses.append(l.mean())
        rows.append((spec[0], float(np.mean(errs)), float(np.mean(losses))))
    return rows


def held_out(name: str, variants, passes: int = 10, shuffles: int = 3, centered: bool = False,
             running: bool = False) -> list[tuple]:
    """``running``: each training row minus the mean of every row seen so
    far (over the passes), the test rows minus the final mean."""
    d = load_bundled(name)
    X_train, X_test = d.X_train, d.X_test
    if centered:  # by the training mean
        X_train, X_test = X_train - X_train.mean(0), X_test - X_train.mean(0)
    rows = []
    for spec in variants:
        accs = []
        for s in range(shuffles):
            model, total, seen = None, np.zeros(X_train.shape[1]), 0
            for e in range(passes):
                order = np.random.default_rng([s, e]).permutation(len(d.y_train))
                X = X_train[order]
                if running:
                    sums = total + np.cumsum(X, axis=0)
                    X = X - sums / (seen + np.arange(1, len(X) + 1))[:, None]
                    total, seen = sums[-1], seen + len(X)
                model, _, _ = run_variant(spec, X, d.y_train[order], d.n_classes, model)
            X = X_test - total / seen if running else X_test
            pred = model.predict(X) if spec[1] == "kernel" else predict_numpy(model, X)
            accs.append(np.mean(pred == d.y_test))
        rows.append((spec[0], float(np.mean(accs))))
    return rows


def kotlowski_evidence(name: str, centered: bool) -> str:
    """kotlowski1 after one pass (shuffle 0): the largest h²/s² of any weight
    against 2α ln(t d), where its weights start to count; the loss of the
    last third of the pass."""
    d = load_bundled(name)
    X = np.vstack([d.X_train, d.X_test])
    y = np.concatenate([d.y_train, d.y_test])
    X = X - X.mean(0) if centered else X
    order = np.random.default_rng(0).permutation(len(y))
    model, _, losses = run_kernel("kotlowski1", X[order], y[order], d.n_classes, {})
    h, s2 = model.algorithm.field(model.state, "h"), model.algorithm.field(model.state, "s2")
    ratio = np.max(h * h / np.maximum(s2, 1e-300)[:, None])
    alpha = model.algorithm.params["alpha"]
    threshold = 2 * alpha * math.log(len(y) * model.state.scalars["dim"])
    return (f"max h²/s² {ratio:5.1f} against 2α ln(t d) {threshold:4.1f}; "
            f"loss of the last third {losses[-len(y) // 3:].mean():.3f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--centered", action="store_true", help="also run on mean-centred features")
    args = ap.parse_args(argv)
    baselines = BASELINES if have("vowpalwabbit") else []
    if not baselines:
        print(missing_message("vowpalwabbit", "the VW rows"))
    print("one pass over all rows, mean of 3 shuffles, bias on: progressive error / mean loss")
    for name in args.sets.split(","):
        k = load_bundled(name).n_classes
        print(f"\n{name} (ln K = {math.log(k):.3f})")
        for label, err, loss in progressive(name, VARIANTS + MIXTURE + baselines):
            print(f"  {label:40s} error {100 * err:5.1f}%  loss {loss:.3f}")
        if args.centered:
            for label, err, loss in progressive(name, CENTRED, centered=True):
                print(f"  centred: {label:31s} error {100 * err:5.1f}%  loss {loss:.3f}")
        if args.centered:
            for label, err, loss in progressive(name, CENTRED[:1] + baselines[:1], running=True):
                print(f"  running mean: {label:26s} error {100 * err:5.1f}%  loss {loss:.3f}")
        print(f"  kotlowski1 evidence, raw: {kotlowski_evidence(name, False)}")
        if args.centered:
            print(f"  kotlowski1 evidence, centred: {kotlowski_evidence(name, True)}")
    print("\niris, 10 passes over the 2/3 training split, held-out accuracy (mean of 3 orders)")
    for label, acc in held_out("iris", VARIANTS):
        print(f"  {label:40s} {acc:.3f}")
    for label, acc in held_out("iris", VARIANTS[:1] + VARIANTS[6:7], passes=40):
        print(f"  40 passes: {label:29s} {acc:.3f}")
    if args.centered:
        for label, acc in held_out("iris", CENTRED, centered=True):
            print(f"  centred: {label:31s} {acc:.3f}")
        for label, acc in held_out("iris", CENTRED[:1], running=True):
            print(f"  running mean: {label:26s} {acc:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
