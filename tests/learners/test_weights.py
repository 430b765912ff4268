"""Importance weights: a weight h ≥ 0 multiplies the example's loss.

For every learner, checked against the slow references of tests/reference
(which learn from h·ℓ as each family's docstring says):

- the weighted kernel gives the weighted reference's predictions, on random
  weights and on adversarial ones (0, 1e-9, 1e3, mixed in one stream);
- weight 1 is the unweighted run bit for bit; weight 0 is a no-op bit for bit
  (the state and t do not move, the loss is still reported);
- split over feature shards, the weighted run equals one learner;
- weight k is k repeats only where the algorithm makes it an identity: the
  importance-aware implicit update (Karampatziakis & Langford 2011, §4.1:
  the update for h₁ + h₂ is the update for h₁ then h₂), within round-off;
  and the plain implicit update with weight h, split into n repeats of weight
  h/n, tends to it within the bound stated in the test.
"""

import math

import numpy as np
import pytest

from learners import make_algorithm, make_learner
from learners.losses import loss_and_grad, prepare_labels
from learners.sharding import ShardedLearner
from tests.support.contract import NAMES, cases, data, loss_for, model
from tests.reference import make_reference
from tests.support.compare import assert_scores_match
from tests.support.gen import to_csr

CASES = cases(softmax=False) + [c for c in cases() if c[1] == "softmax" and c[0] != "kotlowski1"]
AWARE = {"importance_aware": 1.0}


def mixed_weights(rng, n, kind):
    if kind == "random":
        return rng.uniform(0.0, 3.0, size=n)
    # adversarial: exact zeros, tiny and huge weights side by side with ordinary ones
    return rng.choice([0.0, 1e-9, 1.0, 0.5, 7.0, 1e3], size=n)


def reference_run(name, X, y, w, loss, **params):
    K = 3 if loss == "softmax" else 1
    ref = make_reference(name, X.shape[1] + 1, loss, K, **params)
    rows = [ref.step([1.0] + x.tolist(), float(label), float(h)) for x, label, h in zip(X, y, w)]
    shape = (len(rows), K)
    return (np.array([r[0] for r in rows], dtype=float).reshape(shape),
            np.array([r[1] for r in rows], dtype=float).reshape(shape),
            np.array([r[2] for r in rows], dtype=float))


def check_against_reference(name, loss, X, y, w, layout, rng, **params):
    want, scale, want_losses = reference_run(name, X, y, w, loss, **params)
    learner = model(name, loss, **params)
    got, losses = learner.learn(X if layout == "dense" else to_csr(X, rng), y, w, return_losses=True)
    assert np.abs(want).max() > 0  # the reference did move
    rtol = 1e-12
    if name == "kotlowski2":  # as in test_contract: the reference's SVD pseudo-inverse
        rtol, scale = 1e-8, np.maximum(scale, np.median(scale))
    assert_scores_match(got, want[:, 0] if want.shape[1] == 1 else want,
                        scale[:, 0] if scale.shape[1] == 1 else scale, rtol)
    np.testing.assert_array_equal(np.isnan(losses), np.isnan(want_losses))
    assert learner.n_examples == int(np.sum((w > 0) & ~np.isnan(y)))


@pytest.mark.parametrize("name,loss", CASES)
@pytest.mark.parametrize("kind,layout", [("random", "dense"), ("adversarial", "csr-shuffled")])
def test_weighted_kernel_equals_the_weighted_reference(name, loss, kind, layout):
    rng, X, y = data(NAMES.index(name) + 40, loss, n=120, d=6, log10_scale=(-1.0, 1.0))
    y[::11] = np.nan
    w = mixed_weights(rng, len(y), kind)
    if name in ("kotlowski1", "kotlowski2", "scinol-mix") and kind == "adversarial":
        # Kotłowski's potentials are exp((h² ...)/(2α s²)): h grows with the
        # weights, and a weight 1e3 overflows it to ∞ in both codes.
        w = np.minimum(w, 7.0)
    check_against_reference(name, loss, X, y, w, layout, rng)


@pytest.mark.parametrize("kind", ["random", "adversarial"])
def test_importance_aware_implicit_equals_its_reference(kind):
    rng, X, y = data(77, "squared", n=120, d=6, log10_scale=(-1.0, 1.0))
    check_against_reference("implicit", "squared", X, y, mixed_weights(rng, len(y), kind), "dense", rng, **AWARE)


@pytest.mark.parametrize("name,loss", cases() + [("implicit+aware", "squared")])
def test_weight_one_is_the_unweighted_run_bit_for_bit(name, loss):
    name, params = ("implicit", AWARE) if name == "implicit+aware" else (name, {})
    _, X, y = data(6, loss, n=200, d=6)
    plain, weighted = model(name, loss, **params), model(name, loss, **params)
    want, want_losses = plain.learn(X, y, return_losses=True)
    got, losses = weighted.learn(X, y, np.ones(len(y)), return_losses=True)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(losses, want_losses)
    for key, arr in plain.state.arrays.items():
        np.testing.assert_array_equal(weighted.state.arrays[key], arr, err_msg=key)
    assert weighted.state.scalars == plain.state.scalars


@pytest.mark.parametrize("name,loss", cases())
def test_weight_zero_is_a_no_op_bit_for_bit(name, loss):
    rng, X, y = data(7, loss, n=200, d=6)
    w = np.where(rng.uniform(size=len(y)) < 0.3, 0.0, rng.uniform(0.1, 3.0, size=len(y)))
    keep = w > 0
    full = model(name, loss)
    scores, losses = full.learn(X, y, w, return_losses=True)
    kept = model(name, loss)
    np.testing.assert_array_equal(kept.learn(X[keep], y[keep], w[keep]), scores[keep])
    for key, arr in kept.state.arrays.items():
        n = min(arr.shape[0], full.state.arrays[key].shape[0])
        np.testing.assert_array_equal(full.state.arrays[key][:n], arr[:n], err_msg=key)
    assert full.state.scalars == kept.state.scalars and full.n_examples == int(keep.sum())
    # The rows of weight 0 still report the loss of their prediction.
    yy = prepare_labels(loss, y, 3 if loss == "softmax" else 1)
    for i in np.flatnonzero(~keep)[:10]:
        assert losses[i] == pytest.approx(loss_and_grad(loss, yy[i], np.atleast_1d(scores[i]))[0], rel=1e-12)


@pytest.mark.parametrize("name,loss", [c for c in cases() if make_algorithm(c[0]).shardable])
def test_weighted_shards_equal_one_weighted_learner(name, loss):
    rng, X, y = data(8, loss, n=250, d=10, log10_scale=(-1.0, 1.0))
    w = mixed_weights(rng, len(y), "random")
    w[::7] = 0.0
    K = 3 if loss == "softmax" else 1
    single = model(name, loss)
    want = single.learn(X, y, w)
    sharded = ShardedLearner(make_algorithm(name), loss, 3, n_outputs=K)
    np.testing.assert_allclose(sharded.learn(to_csr(X), y, w), want, rtol=1e-9, atol=1e-12)
    merged = sharded.merged_state(single.state.n_coords)
    for key, arr in single.state.arrays.items():
        np.testing.assert_allclose(merged.arrays[key], arr, rtol=1e-9, atol=1e-12, err_msg=key)
    assert merged.scalars == pytest.approx(single.state.scalars, rel=1e-12)


def test_importance_aware_weight_k_equals_k_repeats():
    """Karampatziakis & Langford 2011, §4.1: with the importance-aware update,
    weight h₁ + h₂ on an example is weight h₁ then weight h₂ on it. So weight
    k ∈ {1, 2, 3} equals the row repeated k times, and 2.5 equals 1 then 1.5,
    up to round-off: the residual ŷ - y is multiplied by e^{-hη|x|²} once
    instead of by its factors, a few ulps apart, so the weights agree to
    1e-12 of the sum of the step sizes that built them."""
    rng, X, y = data(9, "squared", n=150, d=5, log10_scale=(-1.0, 1.0))
    k = rng.choice([1.0, 2.0, 3.0, 2.5], size=len(y))
    weighted = make_learner("implicit", "squared", lr=0.3, **AWARE)
    weighted.learn(X, y, k)
    split = [(i, h) for i, kk in enumerate(k) for h in ([1.0, 1.5] if kk == 2.5 else [1.0] * int(kk))]
    repeated = make_learner("implicit", "squared", lr=0.3, **AWARE)
    rows = np.array([i for i, _ in split])
    repeated.learn(X[rows], y[rows], np.array([h for _, h in split]))
    ref = make_reference("implicit", X.shape[1] + 1, "squared", lr=0.3, **AWARE)
    for i, kk in enumerate(k):  # the reference's Σ|Δw|: what the round-off is relative to
        ref.step([1.0] + X[i].tolist(), float(y[i]), float(kk))
    got, want = repeated.weights()[:, 0], weighted.weights()[:, 0]
    assert np.all(np.abs(got - want) <= 1e-12 * np.array(ref.wscale)[:, 0] + 1e-300)
    # ... and the plain implicit update is not invariant: there the two differ.
    plain_k, plain_rep = make_learner("implicit", "squared", lr=0.3), make_learner("implicit", "squared", lr=0.3)
    plain_k.learn(X, y, k)
    plain_rep.learn(X[rows], y[rows], np.array([h for _, h in split]))
    assert np.abs(plain_rep.weights() - plain_k.weights()).max() > 1e-3 * np.abs(plain_k.weights()).max()


@pytest.mark.parametrize("h", [0.5, 4.0, 40.0])
def test_implicit_repeats_of_weight_h_over_n_tend_to_the_importance_aware_update(h):
    """One example, the plain implicit update with weight h/n applied n times:
    each multiplies the residual r = ŷ - y by 1/(1 + (h/n)η|x|²), so after n
    of them r_n = r (1 + a/n)^{-n}, a = hη|x|², while the importance-aware
    update gives r e^{-a} (Karampatziakis & Langford 2011, §4: the limit of
    infinitely many infinitesimal updates). Since n log(1 + a/n) ≥ a - a²/(2n),
    0 ≤ r_n/r - e^{-a} ≤ e^{-a} (e^{a²/(2n)} - 1): checked for n up to 4096."""
    x, label, lr = np.array([[0.7, -1.3, 2.0]]), np.array([3.0]), 0.05
    aware = make_learner("implicit", "squared", lr=lr, **AWARE)
    aware.learn(x, label, [h])
    a = h * lr * (1.0 + float((x @ x.T)[0, 0]))  # the bias is a coordinate with x = 1
    r0 = -label[0]
    r_aware = float(aware.decision_function(x)[0]) - label[0]
    assert r_aware == pytest.approx(r0 * math.exp(-a), rel=1e-12)
    previous = math.inf
    for n in (1, 4, 64, 4096):
        plain = make_learner("implicit", "squared", lr=lr)
        plain.learn(np.repeat(x, n, axis=0), np.repeat(label, n), np.full(n, h / n))
        gap = (float(plain.decision_function(x)[0]) - label[0]) / r0 - math.exp(-a)
        bound = math.exp(-a) * math.expm1(a * a / (2 * n))
        assert -1e-12 <= gap <= bound + 1e-12
        assert gap < previous
        previous = gap


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_bad_weights_are_refused_with_their_position(bad):
    learner = make_learner("scinol2", "logistic")
    with pytest.raises(ValueError, match=r"bad weight .* at position 2"):
        learner.learn(np.ones((3, 2)), [1, -1, 1], [1.0, 2.0, bad])
    with pytest.raises(ValueError, match="3 rows of features but 2 weights"):
        learner.learn(np.ones((3, 2)), [1, -1, 1], [1.0, 2.0])
    assert learner.n_examples == 0


def test_the_river_and_sklearn_entry_points_take_weights():
    _, X, y = data(10, "logistic", n=60, d=4)
    w = np.linspace(0.0, 2.0, len(y))
    batch = make_learner("scinol2", "logistic")
    batch.learn(X, y, w)
    one = make_learner("scinol2", "logistic")
    for row, label, h in zip(X, y, w):
        one.learn_one({i: v for i, v in enumerate(row)}, label, h)
    sk = make_learner("scinol2", "logistic")
    sk.partial_fit(X, y, classes=[-1, 1], sample_weight=w)
    np.testing.assert_array_equal(one.weights(), batch.weights())
    np.testing.assert_array_equal(sk.weights(), batch.weights())


@pytest.mark.parametrize("name", ["scinol1", "scinol2", "kotlowski1", "kotlowski2", "nag"])
def test_weights_keep_scale_invariance(name):
    """The weight scales g, never x; the scale statistics (M, s, s², S) see x
    only, so the declared invariance survives weights."""
    loss = loss_for(name)
    rng, X, y = data(11, loss, n=300, d=6, log10_scale=(-1.0, 1.0))
    w = rng.uniform(0.0, 3.0, size=len(y))
    a = 10.0 ** rng.uniform(-3, 3, size=X.shape[1])
    base = model(name, loss).learn(X, y, w)
    scaled = model(name, loss).learn(X * a, y, w)
    scale = np.maximum(np.abs(base), np.median(np.abs(base)) + 1e-300)
    assert np.all(np.abs(scaled - base) <= 1e-9 * scale)


@pytest.mark.parametrize("name,loss,params", [
    ("pa", "hinge", {}), ("pa1", "hinge", {"C": 0.05}), ("pa1", "epsilon_insensitive", {"C": 0.05}),
    ("aprox", "hinge", {"lr": 0.02, "power": 0.0}), ("aprox", "epsilon_insensitive", {"lr": 0.02, "power": 0.0}),
])
def test_capped_steps_on_piecewise_linear_losses_make_weight_k_equal_k_repeats(name, loss, params):
    """While the hinge or ε-insensitive loss is positive it is linear in ŷ, so
    a step τ|x|² lowers it by exactly that much: k repeats of a step capped at
    C (PA-I) or η (aProx, constant rate) move min(kC, ℓ/|x|²) in all, which is
    the weight-k step; PA's step already zeroes the loss, so repeats add
    nothing and PA ignores the weight. An identity up to round-off (the loss
    after a full step is a few ulps, not 0): checked to 1e-9 of Σ|Δw|."""
    rng, X, y = data(12, loss, n=150, d=5, log10_scale=(-1.0, 1.0))
    k = rng.choice([1, 2, 3, 5], size=len(y))
    weighted = model(name, loss, **params)
    weighted.learn(X, y, k.astype(float))
    rows = np.repeat(np.arange(len(y)), k)
    repeated = model(name, loss, **params)
    repeated.learn(X[rows], y[rows])
    ref = make_reference(name, X.shape[1] + 1, loss, **params)
    for i in rows:
        ref.step([1.0] + X[i].tolist(), float(y[i]))
    mass = np.array(ref.wscale)[:, 0]
    assert mass.max() > 0
    assert np.all(np.abs(repeated.weights()[:, 0] - weighted.weights()[:, 0]) <= 1e-9 * mass.max())
