"""Implicit OGD, Passive-Aggressive (PA, PA-I, PA-II) and aProx (Orabona 2020)
against the slow literal references of tests/reference_pa.py, plus the
per-step properties that define them."""

import math

import numpy as np
import pytest

from tests.support.gen import features, labels, to_csr
from learners import make_learner
from tests.reference.pa import (ReferenceAProx, ReferenceImplicit, ReferencePA, loss_grad, run,
                          truncated_prox_step)

RTOL = 1e-12
N, D = 160, 7


def data(seed, loss, n=N, d=D, unlabelled=False):
    """gen.features (scales 1e-3..1e3, a zero column, late columns, ~30%
    zeros) plus one all-zero row; labels from gen.labels."""
    rng = np.random.default_rng(seed)
    X = features(rng, n, d)
    X[n // 3] = 0.0
    kind = {"epsilon_insensitive": "squared"}.get(loss, loss)
    y = labels(rng, X, kind)
    if unlabelled:
        y[::5] = np.nan
    return rng, X, y


def assert_close(got, want, scale, what):
    """|got - want| ≤ RTOL · scale elementwise (scale: Σ of the magnitudes
    of the terms that built the value)."""
    got, want, scale = (np.asarray(a, dtype=float).reshape(np.shape(want)) for a in (got, want, scale))
    err = np.abs(got - want)
    bound = RTOL * scale + 1e-300
    worst = np.unravel_index(np.argmax(err / bound), err.shape)
    assert np.all(err <= bound), (f"{what} {worst}: kernel {got[worst]!r} vs reference {want[worst]!r} "
                                  f"(scale {scale[worst]!r})")


def check_against_reference(model, ref, X, y, bias, layout="dense", rng=None):
    K = ref.K
    want, scale, want_loss = run(ref, X, y, bias)
    batch = X if layout == "dense" else to_csr(X, rng if layout == "csr-shuffled" else None)
    got, got_loss = model.learn(batch, y, return_losses=True)
    assert_close(got, want[:, 0] if K == 1 else want, scale[:, 0] if K == 1 else scale, "score at row")
    n_coords = X.shape[1] + bias
    assert_close(model.weights()[:n_coords], ref.weights(), np.array(ref.wscale), "weight")
    np.testing.assert_array_equal(np.isnan(got_loss), np.isnan(want_loss))
    assert model.n_examples == ref.t


# -- each learner equals its reference ---------------------------------------------

@pytest.mark.parametrize("lr", [0.1, 10.0, 1e3])
@pytest.mark.parametrize("bias", [True, False])
def test_implicit_equals_the_argmin(lr, bias):
    rng, X, y = data(int(lr) + bias, "squared", unlabelled=bias)
    check_against_reference(make_learner("implicit", "squared", lr=lr, bias=bias),
                            ReferenceImplicit(D + bias, lr), X, y, bias)


@pytest.mark.parametrize("variant", ["pa", "pa1", "pa2"])
@pytest.mark.parametrize("loss", ["hinge", "epsilon_insensitive"])
@pytest.mark.parametrize("C,eps,bias,layout", [
    (1.0, None, True, "dense"),
    (0.02, 0.5, True, "csr-shuffled"),  # small C: PA-I's cap binds often
    (30.0, 0.0, False, "dense"),
])
def test_pa_equals_reference(variant, loss, C, eps, bias, layout):
    rng, X, y = data(len(variant) + len(loss), loss, unlabelled=not bias)
    params = {} if variant == "pa" else {"C": C}
    model = make_learner(variant, loss, bias=bias, loss_param=eps, **params)
    ref = ReferencePA(variant, D + bias, loss, C=C, eps=0.1 if eps is None else eps)
    check_against_reference(model, ref, X, y, bias, layout, rng)


APROX_SETTINGS = [
    {},  # defaults: lr 1, power 0.5, loss_low 0
    {"lr": 2.0, "power": 0.3, "loss_low": 0.3},  # many examples with ℓ ≤ ℓ_low
    {"lr": 0.05, "power": 0.0, "loss_low": -0.5},
]


@pytest.mark.parametrize("loss", ["hinge", "epsilon_insensitive", "squared", "absolute", "logistic", "softmax"])
@pytest.mark.parametrize("setting", range(len(APROX_SETTINGS)))
def test_aprox_equals_the_truncated_prox(loss, setting):
    params = APROX_SETTINGS[setting]
    rng, X, y = data(setting, loss, unlabelled=setting == 1)
    K = 3 if loss == "softmax" else 1
    model = make_learner("aprox", loss, n_classes=3 if K == 3 else None, **params)
    ref = ReferenceAProx(D + 1, loss, n_outputs=K, **params)
    check_against_reference(model, ref, X, y, True, "csr" if setting == 2 else "dense", rng)


def test_aprox_makes_no_step_when_the_loss_is_below_loss_low():
    """The truncated model max(ℓ + ⟨g, v - w⟩, ℓ_low) is flat at w when
    ℓ ≤ ℓ_low, so its prox step is zero (the paper's closed form
    min(η, (ℓ - ℓ_low)/‖g‖²) would step uphill)."""
    model = make_learner("aprox", "squared", lr=1.0, power=0.0, loss_low=1.0, bias=False)
    model.learn([[1.0]], [4.0])  # ℓ = 8 > 1: w = 0 - min(1, 7/16)·(-4) = 1.75
    np.testing.assert_array_equal(model.weights(), [[1.75]])
    scores, losses = model.learn([[1.0], [2.0]], [2.0, 3.0], return_losses=True)  # ℓ = 0.03125, then 0.125: both < 1
    np.testing.assert_array_equal(losses, [0.5 * 0.25 ** 2, 0.5 * 0.5 ** 2])
    np.testing.assert_array_equal(model.weights(), [[1.75]])


# -- the paper's correspondence: PA on hinge is aProx on the truncated model ------------

@pytest.mark.parametrize("loss", ["hinge", "epsilon_insensitive"])
@pytest.mark.parametrize("C", [0.02, 1.0])
def test_pa1_is_aprox_with_constant_rate_C(loss, C):
    """PA-I with C ≡ aProx with lr = C, power = 0, loss_low = 0 (Orabona 2020, §3:
    for hinge (and ε-insensitive) |g| = 1 whenever ℓ > 0, so (ℓ - 0)/‖g x‖²
    = ℓ/‖x‖² and η_t = C/t⁰ = C). Same arithmetic, so bit for bit; also
    between the two independent references, to 1e-12."""
    rng, X, y = data(3, loss)
    pa1 = make_learner("pa1", loss, C=C)
    aprox = make_learner("aprox", loss, lr=C, power=0.0, loss_low=0.0)
    np.testing.assert_array_equal(pa1.learn(X, y), aprox.learn(X, y))
    np.testing.assert_array_equal(pa1.weights(), aprox.weights())

    ref_pa = ReferencePA("pa1", D + 1, loss, C=C)
    ref_ap = ReferenceAProx(D + 1, loss, lr=C, power=0.0, loss_low=0.0)
    s_pa, scale, _ = run(ref_pa, X, y)
    s_ap, _, _ = run(ref_ap, X, y)
    assert_close(s_ap, s_pa, scale, "reference score at row")
    assert_close(ref_ap.weights(), ref_pa.weights(), np.array(ref_pa.wscale), "reference weight")


def test_pa_is_aprox_with_an_unbounded_rate():
    """PA (no C) ≡ aProx as lr → ∞ (here 1e300, never the smaller term)."""
    rng, X, y = data(4, "hinge")
    pa = make_learner("pa", "hinge")
    aprox = make_learner("aprox", "hinge", lr=1e300, power=0.0)
    np.testing.assert_array_equal(pa.learn(X, y), aprox.learn(X, y))
    np.testing.assert_array_equal(pa.weights(), aprox.weights())


# -- per-step properties -------------------------------------------------------------

def one_step_at_a_time(model, X, y):
    """For each row: (x with bias, ŷ before, loss, weights before, weights
    after, ŷ after = x·w_{t+1})."""
    for row, label in zip(X, y):
        before = model.weights().copy() if model.state is not None else None
        (yhat,), (value,) = model.learn(row[None, :], [label], return_losses=True)
        after = model.weights().copy()
        yhat_after = float(model.decision_function(row[None, :])[0])
        x = np.concatenate([[1.0], row])
        yield x, float(yhat), float(value), before, after, yhat_after


def step_scale(x, before, after):
    """Σ_j |x_j w_j| before and after the step: what ŷ and ŷ' are exact to."""
    scale = float(np.abs(x * after[: len(x), 0]).sum())
    if before is not None:
        scale += float(np.abs(x[: len(before)] * before[:, 0]).sum())
    return scale


@pytest.mark.parametrize("variant", ["pa", "pa1", "pa2"])
@pytest.mark.parametrize("loss", ["hinge", "epsilon_insensitive"])
def test_pa_step_lands_where_the_definition_says(variant, loss):
    """ŷ moves by τ ‖x‖² towards the target, so the loss of example t at the
    new weights is ℓ' = 0 (PA), max(0, ℓ - C‖x‖²) (PA-I), ℓ/(1 + 2C‖x‖²)
    (PA-II); and when ℓ = 0 nothing moves (passive), bit for bit."""
    C, eps = 0.05, 1.0
    rng, X, y = data(5, loss, n=300, d=5)
    model = make_learner(variant, loss, loss_param=eps, **({} if variant == "pa" else {"C": C}))
    passive = active = 0
    for i, (x, yhat, value, before, after, yhat_after) in enumerate(one_step_at_a_time(model, X, y)):
        label = float(y[i])
        want_value, _ = loss_grad(loss, label, [yhat], eps)
        assert value == want_value
        if value == 0.0:
            passive += 1
            if before is not None:
                np.testing.assert_array_equal(after[: len(before)], before)
            continue
        active += 1
        x2 = float(x @ x)
        new_value, _ = loss_grad(loss, label, [yhat_after], eps)
        expected = {"pa": 0.0, "pa1": max(0.0, value - C * x2), "pa2": value / (1.0 + 2.0 * C * x2)}[variant]
        scale = step_scale(x, before, after) + abs(label)
        assert abs(new_value - expected) <= RTOL * scale + 1e-300, (variant, loss, value, new_value, expected)
        if variant == "pa":
            # exactly on the margin / tube edge, to round-off
            target = 1.0 if loss == "hinge" else eps
            reached = label * yhat_after if loss == "hinge" else abs(yhat_after - label)
            assert abs(reached - target) <= RTOL * scale
    assert passive > 10 and active > 10, (passive, active)


def test_pa_step_on_the_margin_is_passive():
    """y ŷ = 1 exactly: ℓ = 0 (the hinge's kink; g = -y by convention), τ = 0."""
    model = make_learner("pa", "hinge", bias=False)
    model.learn([[2.0]], [1])  # ŷ 0, ℓ 1, τ 1/4: w = 0.5, so ŷ = 1 next
    scores, losses = model.learn([[2.0]], [1], return_losses=True)
    assert scores[0] == 1.0 and losses[0] == 0.0
    np.testing.assert_array_equal(model.weights(), [[0.5]])


@pytest.mark.parametrize("lr", [0.01, 1.0, 1e3])
def test_implicit_never_overshoots(lr):
    """r' = x·w_{t+1} - y = r / (1 + η‖x‖²): same sign as r = ŷ_t - y,
    smaller in magnitude, for any η (plain OGD overshoots once η‖x‖² > 2)."""
    rng, X, y = data(6, "squared", n=120, d=5)
    model = make_learner("implicit", "squared", lr=lr)
    overshoot_ogd = 0
    for i, (x, yhat, _, before, after, yhat_after) in enumerate(one_step_at_a_time(model, X, y)):
        r, r_new = yhat - y[i], yhat_after - y[i]
        x2 = float(x @ x)
        scale = step_scale(x, before, after) + abs(y[i])
        assert abs(r_new - r / (1.0 + lr * x2)) <= RTOL * scale
        if abs(r) / (1.0 + lr * x2) > 1e-9 * scale:  # beyond round-off: a strict check
            assert r_new * r > 0 and abs(r_new) < abs(r), (i, r, r_new)
        else:
            assert abs(r_new) <= abs(r) + RTOL * scale
        overshoot_ogd += lr * x2 > 2.0
    if lr >= 1.0:
        assert overshoot_ogd > 10  # the check had teeth


# -- PA's closed forms are the argmins of their definitions (references only) ---------

@pytest.mark.parametrize("variant", ["pa", "pa1", "pa2"])
@pytest.mark.parametrize("loss", ["hinge", "epsilon_insensitive"])
def test_pa_closed_forms_minimise_their_objectives(variant, loss):
    """Crammer et al.: PA = argmin ½‖v - w‖² s.t. ℓ(v) = 0; PA-I = argmin
    Cℓ(v) + ½‖v - w‖²; PA-II = argmin Cℓ(v)² + ½‖v - w‖². Each objective is
    convex, so it suffices that no small perturbation of the reference's
    step improves it."""
    rng = np.random.default_rng(11)
    C, eps, d = 0.3, 0.2, 5
    checked = 0
    for _ in range(150):
        x = rng.normal(size=d) * 10.0 ** rng.uniform(-1, 1, size=d)
        w = rng.normal(size=d)
        label = float(rng.choice([-1.0, 1.0])) if loss == "hinge" else float(rng.normal() * 3)
        ref = ReferencePA(variant, d, loss, C=C, eps=eps)
        ref.w = [[float(v)] for v in w]
        value = ref.step(x.tolist(), label)[2]
        if value == 0.0:
            continue
        checked += 1
        v = ref.weights()[:, 0]

        def ell(u):
            return loss_grad(loss, label, [float(x @ u)], eps)[0]

        def objective(u):
            prox = 0.5 * float((u - w) @ (u - w))
            if variant == "pa":
                return prox if ell(u) <= 1e-12 * float(np.abs(x * u).sum()) else math.inf
            return prox + (C * ell(u) if variant == "pa1" else C * ell(u) ** 2)

        best = objective(v)
        assert math.isfinite(best)
        step = float(np.linalg.norm(v - w))
        for direction in [x / np.linalg.norm(x), *rng.normal(size=(4, d))]:
            for delta in (1e-3 * step, -1e-3 * step):
                assert objective(v + delta * direction) >= best - 1e-13 * (best + 1.0), (variant, loss)
    assert checked > 50


def test_truncated_prox_step_cases():
    """The bisection in the aProx reference on the three regimes."""
    assert truncated_prox_step(2.0, 4.0, 0.0, 0.1) == 0.1  # rate binds
    assert truncated_prox_step(2.0, 4.0, 0.0, 10.0) == 0.5  # reaches ℓ_low: s = (ℓ - ℓ_low)/‖G‖²
    assert truncated_prox_step(2.0, 4.0, 3.0, 10.0) == 0.0  # ℓ < ℓ_low: flat
    assert truncated_prox_step(2.0, 0.0, 0.0, 10.0) == 0.0


# -- losses that are refused -----------------------------------------------------------

@pytest.mark.parametrize("name,wrong,allowed", [
    ("implicit", "hinge", "squared"),
    ("implicit", "logistic", "squared"),
    ("pa", "logistic", "hinge and epsilon_insensitive"),
    ("pa1", "squared", "hinge and epsilon_insensitive"),
    ("pa2", "softmax", "hinge and epsilon_insensitive"),
])
def test_wrong_loss_is_refused_naming_the_allowed_ones(name, wrong, allowed):
    with pytest.raises(ValueError, match=f"^{name} is defined for the {allowed} loss, not {wrong}$"):
        make_learner(name, wrong)


def test_aprox_takes_any_loss_and_pa_takes_no_C():
    for loss in ("logistic", "hinge", "absolute", "squared", "epsilon_insensitive"):
        make_learner("aprox", loss)
    make_learner("aprox", "softmax", n_classes=3)
    with pytest.raises(ValueError, match="pa has no parameter C"):
        make_learner("pa", "hinge", C=1.0)
    with pytest.raises(ValueError, match="C must be a positive number"):
        make_learner("pa1", "hinge", C=0.0)
