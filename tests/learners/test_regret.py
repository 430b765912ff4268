"""The regret bounds of Kempka et al. 2019: Theorem 3.1 (ScInOL1) and Theorem 3.2
(ScInOL2) hold, for every comparator we can compute, on random and
adversarially ordered sequences."""

import math

import numpy as np
import pytest

from learners import make_learner


def logistic_minimiser(X, y, ridge=1e-9, iters=100):
    """Offline argmin of Σ ln(1 + e^{-y xᵀu}) by damped Newton (columns
    normalised first so the Hessian is well conditioned)."""
    scale = np.maximum(np.abs(X).max(axis=0), 1e-300)
    Z = X / scale
    u = np.zeros(X.shape[1])

    def objective(v):
        return np.logaddexp(0, -y * (Z @ v)).sum() + 0.5 * ridge * v @ v

    for _ in range(iters):
        m = y * (Z @ u)
        p = np.exp(-np.logaddexp(0, m))  # σ(-m)
        grad = -(Z.T @ (y * p)) + ridge * u
        hess = (Z * (p * (1 - p))[:, None]).T @ Z + ridge * np.eye(len(u))
        step = np.linalg.solve(hess, grad)
        t, f0 = 1.0, objective(u)
        while objective(u - t * step) > f0 and t > 1e-12:
            t /= 2
        u = u - t * step
        if np.abs(t * step).max() < 1e-12:
            break
    return u / scale


def losses(loss, y, s):
    if loss == "logistic":
        return np.logaddexp(0, -y * s)
    if loss == "hinge":
        return np.maximum(0, 1 - y * s)
    return np.abs(s - y)


def ŝ(model, d):
    """Ŝ_T,i = √(S²_T,i + M²_T,i) from the learner's final state."""
    field = lambda name: model.algorithm.field(model.state, name)[:d]  # noqa: E731
    return np.sqrt(field("S2")[:, 0] + field("M") ** 2)


def bound(variant, u, S_hat, T, first_x, eps=1.0):
    total = 0.0
    for ui, s, x0 in zip(np.abs(u), S_hat, first_x):
        if s == 0.0:  # feature never seen: its weight stays 0, it adds no regret
            continue
        if variant == 1:
            total += 2 * ui * s * math.log1p(2 * ui * s * T / eps) + eps * (1 + math.log(T))
        else:
            total += eps + (2 * ui * s * (math.log(3 * ui * s**3 / eps / x0**2) - 1) if ui > 0 else 0.0)
    return total


def sequences():
    rng = np.random.default_rng(2019)
    n, d = 600, 5
    scales = 10.0 ** rng.uniform(-4, 4, size=d)
    X = rng.normal(size=(n, d)) * scales
    u_true = rng.normal(size=d) / scales
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-X @ u_true)), 1.0, -1.0)
    yield "random", X, y
    order = np.argsort(y, kind="stable")
    yield "sorted-by-label", X[order], y[order]
    order = np.argsort(np.abs(X).sum(axis=1))
    yield "small-inputs-first", X[order], y[order]
    Xa = X.copy()
    Xa[0] *= 1e-6  # first non-zero inputs tiny: the worst case of ScInOL2's ratio term
    yield "tiny-first-input", Xa, y
    Xs = X.copy()
    Xs[: n // 2, 2:] = 0.0  # features that appear late
    yield "late-features", Xs, y
    flip = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    yield "alternating-labels", X, flip * np.sign(X[:, 0] + 1e-300)


@pytest.mark.parametrize("variant", [1, 2])
@pytest.mark.parametrize("loss", ["logistic", "hinge", "absolute"])
@pytest.mark.parametrize("name,X,y", list(sequences()), ids=lambda v: v if isinstance(v, str) else "")
def test_regret_bound_holds(variant, loss, name, X, y):
    model = make_learner(f"scinol{variant}", loss, bias=False)
    scores, alg_losses = model.learn(X, y, return_losses=True)
    np.testing.assert_allclose(alg_losses, losses(loss, y, scores), rtol=1e-12, atol=1e-12)
    T = len(y)
    S_hat = ŝ(model, X.shape[1])
    first_x = np.array([col[np.flatnonzero(col)[0]] if col.any() else 0.0 for col in X.T])
    u_star = logistic_minimiser(X, y)
    rng = np.random.default_rng(0)
    comparators = [u_star * c for c in (0.0, 0.1, 0.5, 1.0, 2.0, 10.0)]
    comparators += [rng.normal(size=X.shape[1]) / np.maximum(np.abs(X).max(axis=0), 1e-300) for _ in range(5)]
    cum_alg = alg_losses.sum()
    for u in comparators:
        regret = cum_alg - losses(loss, y, X @ u).sum()
        assert regret <= bound(variant, u, S_hat, T, first_x), (name, u)


def test_bound_is_not_vacuous_for_the_best_comparator():
    """The comparison has teeth: on the random sequence ScInOL2's regret
    against u* is a sizeable fraction of its bound, and positive."""
    name, X, y = next(sequences())
    model = make_learner("scinol2", "logistic", bias=False)
    _, alg_losses = model.learn(X, y, return_losses=True)
    u_star = logistic_minimiser(X, y)
    regret = alg_losses.sum() - losses("logistic", y, X @ u_star).sum()
    S_hat = ŝ(model, 5)
    b = bound(2, u_star, S_hat, len(y), X[0])
    assert 0 < regret < b
    assert regret > 1e-3 * b
