"""Projected OGD (Streeter & McMahan 2010) and KT coin betting (Orabona & Pál 2016): the compiled
kernels against the slow literal references of tests/reference_ogd_kt.py,
and the papers' guarantees checked on the kernels' own runs.

- the five learners ("ogd", "ogd-global", "kt", "kt-avg", "kt-coord") equal
  the references to 1e-12 relative, scores and final state;
- KT's clipping (‖ℓ_t‖ ≤ 1) is applied, keeps the wealth positive, and the
  wealth is W_0 − Σ ⟨ℓ_t, w_t⟩ with the clipped ℓ_t;
- OGD's projection keeps |w| ≤ R;
- kt-avg predicts offline with the averaged iterate, online with w_t;
- regret bounds: KT Theorem 1 (Orabona & Pál 2016); OGD Theorem 3 and Theorem 2
  (Streeter & McMahan 2010) with the theorem's rate (scale = 1).
"""

import math

import numpy as np
import pytest

from tests.support.gen import BINARY, features, labels, to_csr
from tests.support.compare import assert_scores_match, run_reference
from learners import make_learner
from tests.reference.scinol import loss_grad
from tests.reference.ogd_kt import ReferenceKT, ReferenceOGD

RTOL = 1e-12
LEARNERS = ("ogd", "ogd-global", "kt", "kt-avg", "kt-coord")
LOSSES = BINARY + ("softmax",)
KT_VARIANT = {"kt": "alg1", "kt-avg": "avg", "kt-coord": "coord"}
PARAMS = {  # besides the defaults, one non-default setting per learner
    "ogd": [{}, {"radius": 1.0, "scale": 0.6}],  # the paper's experiments: rate × 0.6/R
    "ogd-global": [{}, {"radius": 1.0, "scale": 0.2}],  # × 0.2/R
    "kt": [{}, {"wealth": 0.25}],
    "kt-avg": [{}, {"wealth": 3.0}],
    "kt-coord": [{}, {"wealth": 0.5}],
}


def make_reference(name, d, K, params):
    if name.startswith("ogd"):
        return ReferenceOGD(d, K, params.get("radius", 100.0), params.get("scale", 1.0),
                            global_rate=name == "ogd-global")
    return ReferenceKT(KT_VARIANT[name], d, K, params.get("wealth", 1.0))


def reference_run(name, X, y, loss, K, params, bias=True):
    ref = make_reference(name, X.shape[1] + bias, K, params)
    return (*run_reference(ref, X, y, loss, bias), ref)


def model_for(name, loss, bias=True, **params):
    return make_learner(name, loss, n_classes=3 if loss == "softmax" else None, bias=bias, **params)




def close(got, want, magnitude, what):
    """Entrywise |got - want| ≤ RTOL · magnitude (the size of the terms the
    value is a sum of, so cancellation is not mistaken for disagreement)."""
    got, want, magnitude = np.asarray(got, float), np.asarray(want, float), np.asarray(magnitude, float)
    err = np.abs(got - want)
    bound = RTOL * np.maximum(magnitude, np.abs(want)) + 1e-300
    assert np.all(err <= bound), f"{what}: kernel {got[err > bound][:3]} vs reference {want[err > bound][:3]}"


def assert_state_matches(name, model, ref, d):
    field = lambda f: model.algorithm.field(model.state, f)[:d]  # noqa: E731
    scalars = model.state.scalars
    assert scalars["t"] == ref.t
    if name.startswith("ogd"):
        close(field("w"), ref.w, ref.R, "w")
        assert np.all(np.abs(field("w")) <= ref.R)
        if name == "ogd":
            close(field("sum_g2"), ref.sum_g2, 0.0, "sum_g2")
        else:
            close(scalars["sum_g2"], ref.total_g2, 0.0, "sum_g2")
            assert scalars["dim"] == sum(ref.seen)
            np.testing.assert_array_equal(field("seen") != 0.0, ref.seen)
        return
    close(field("theta"), -np.array(ref.sum_loss), ref.abs_loss, "theta")  # θ = -Σ ℓ
    if name == "kt-coord":
        close(field("wealth"), ref.wealth_i(), np.array(ref.abs_inner_i) + ref.W0, "wealth_i")
    else:
        close(scalars["wealth"], ref.wealth(), ref.W0 + ref.abs_inner, "wealth")
    # The weights the model would predict with offline: w_{T+1}, or w̄_T for kt-avg.
    close(model.weights()[:d], ref.offline(), ref.magnitude(offline=True), "weights")


@pytest.mark.parametrize("name", LEARNERS)
@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("setting", [0, 1])
@pytest.mark.parametrize("layout", ["dense", "csr-shuffled"])
def test_kernel_equals_reference(name, loss, setting, layout):
    params = PARAMS[name][setting]
    rng = np.random.default_rng([LEARNERS.index(name), LOSSES.index(loss), setting])
    X = features(rng, 150, 7)
    y = labels(rng, X, loss)
    K = 3 if loss == "softmax" else 1
    want, scale, ref = reference_run(name, X, y, loss, K, params)
    model = model_for(name, loss, **params)
    data = X if layout == "dense" else to_csr(X, rng)
    got = model.learn(data, y)
    assert_scores_match(got, want, scale)
    assert_state_matches(name, model, ref, X.shape[1] + 1)


@pytest.mark.parametrize("name", LEARNERS)
def test_unlabelled_rows_and_no_bias(name):
    """NaN labels: predicted (kt-avg: with the averaged iterate), not learned."""
    rng = np.random.default_rng(11 + LEARNERS.index(name))
    X = features(rng, 120, 6)
    y = labels(rng, X, "logistic")
    y[::4] = np.nan
    y[:3] = np.nan  # before anything is learned
    for bias in (True, False):
        want, scale, ref = reference_run(name, X, y, "logistic", 1, {}, bias=bias)
        model = model_for(name, "logistic", bias=bias)
        got = model.learn(X, y)
        assert_scores_match(got, want, scale)
        assert_state_matches(name, model, ref, X.shape[1] + bias)


@pytest.mark.parametrize("name", LEARNERS)
def test_features_that_arrive_later(name):
    """A model whose feature count grows between batches (new coordinates
    appended to the state) equals the reference that had those coordinates,
    at 0, all along."""
    rng = np.random.default_rng(21 + LEARNERS.index(name))
    X = features(rng, 200, 6)
    y = labels(rng, X, "hinge")
    Xg = X.copy()
    Xg[:100, 3:] = 0.0
    want, scale, ref = reference_run(name, Xg, y, "hinge", 1, {})
    grown = model_for(name, "hinge")
    first = grown.learn(Xg[:100, :3], y[:100])  # 4 coordinates, then 7
    second = grown.learn(Xg[100:], y[100:])
    assert_scores_match(np.concatenate([first, second]), want, scale)
    assert_state_matches(name, grown, ref, X.shape[1] + 1)


@pytest.mark.parametrize("name", LEARNERS)
def test_extreme_scales_stay_finite(name):
    """Feature scales from 1e-150 to 1e150 in one model: finite scores and
    state, |w| ≤ R, wealth ≥ 0; OGD still equals its reference. (KT's
    clipped loss at these scales rounds differently in the kernel and the
    reference, and θ = -Σ ℓ then cancels to ~1e-16 instead of 0, which at
    |x| ~ 1e150 changes ŷ: KT is not compared here, by design.)"""
    rng = np.random.default_rng(1)
    X = features(rng, 200, 9, log10_scale=(-150.0, 150.0))
    X[:, 0] = rng.normal(size=200) * 1e150
    X[:, 4] = rng.normal(size=200) * 1e-150
    for loss in ("logistic", "softmax"):
        y = labels(rng, X, loss)
        model = model_for(name, loss)
        got = model.learn(X, y)
        assert np.all(np.isfinite(got))
        for arr in model.state.arrays.values():
            assert np.all(np.isfinite(arr))
        if name.startswith("ogd"):
            assert np.all(np.abs(model.algorithm.field(model.state, "w")) <= 100.0)
            want, scale, ref = reference_run(name, X, y, loss, 3 if loss == "softmax" else 1, {})
            assert_scores_match(got, want, scale)
            assert_state_matches(name, model, ref, X.shape[1] + 1)
        elif name == "kt-coord":
            assert np.all(model.algorithm.field(model.state, "wealth") >= 0.0)
        else:
            assert model.state.scalars["wealth"] >= 0.0


# -- KT: the clipping and the wealth -----------------------------------------------
def clipped_losses(X, y, scores, loss, K, per_coordinate=False):
    """From the kernel's own progressive scores: g_t at ŷ_t, G_t = g_t x_t
    (bias column included), the clipped ℓ_t (‖ℓ_t‖ ≤ 1, or |ℓ_{t,i}| ≤ 1 per
    coordinate) and ⟨ℓ_t, w_t⟩ = shrink_t Σ_k g_{t,k} ŷ_{t,k}. Returns (ℓ, G, inner)."""
    Xb = np.column_stack([np.ones(len(X)), X])
    scores = np.asarray(scores).reshape(len(X), K)
    g = np.array([loss_grad(loss, float(label), s.tolist())[1] for label, s in zip(y, scores)])
    G = np.einsum("tj,tk->tjk", Xb, g)
    if per_coordinate:
        return np.clip(G, -1.0, 1.0), G, None
    shrink = 1.0 / np.maximum(np.sqrt((G**2).sum(axis=(1, 2))), 1.0)
    return G * shrink[:, None, None], G, shrink * (g * scores).sum(axis=1)


def test_kt_clipping_is_applied_and_keeps_the_wealth_positive():
    """On this stream ‖g x‖ is ~10³: without the clip the literal Algorithm 1
    bets its way to a negative wealth on the second example; with it the
    wealth stays > 0 and is exactly W_0 − Σ ⟨ℓ_t, w_t⟩ with the clipped ℓ_t."""
    X = np.full((40, 1), 1000.0)
    y = np.where(np.arange(40) % 2 == 0, 1.0, -1.0)
    raw = ReferenceKT("alg1", 1, clip=False)
    raw_wealth = []
    for row, label in zip(X, y):
        raw.step(row.tolist(), label, "hinge")
        raw_wealth.append(raw.wealth())
    assert min(raw_wealth) < 0  # what the clipping is for

    for name in ("kt", "kt-avg"):
        model = model_for(name, "hinge", bias=False)
        wealth, scores = [], []
        for row, label in zip(X, y):  # one row at a time, to see the wealth after each
            scores.append(model.learn(row[None, :], [label])[0])
            wealth.append(model.state.scalars["wealth"])
        w = np.array(scores) / X[:, 0]  # the single weight played at each trial
        g = np.where(y * np.array(scores) <= 1.0, -y, 0.0)  # hinge
        assert np.all(np.abs(g * X[:, 0])[g != 0] > 1)  # the clip is active whenever g ≠ 0
        ell = np.clip(g * X[:, 0], -1.0, 1.0)  # one coordinate: ‖ℓ‖ ≤ 1 is |ℓ| ≤ 1
        np.testing.assert_allclose(wealth, 1.0 - np.cumsum(ell * w), rtol=1e-13, atol=1e-15)
        assert min(wealth) > 0.0
        np.testing.assert_allclose(model.algorithm.field(model.state, "theta")[0, 0], -ell.sum(), rtol=1e-13)


@pytest.mark.parametrize("loss", LOSSES)
def test_kt_wealth_is_one_minus_clipped_inner_products(loss):
    """Wide-scale features (‖g x‖ up to ~10³): wealth_T = 1 − Σ_t ⟨ℓ_t, w_t⟩,
    ⟨ℓ_t, w_t⟩ = Σ_k ℓ-scaled g_k ŷ_k, ℓ clipped; θ = −Σ ℓ; wealth ≥ 0 throughout."""
    rng = np.random.default_rng(5)
    X = features(rng, 200, 6, log10_scale=(-1.0, 3.0))
    y = labels(rng, X, loss)
    K = 3 if loss == "softmax" else 1
    for name in ("kt", "kt-avg"):
        model = model_for(name, loss)
        scores = np.asarray(model.learn(X, y)).reshape(len(X), K)
        ell, G, inner = clipped_losses(X, y, scores, loss, K)
        assert (np.sqrt((G**2).sum(axis=(1, 2))) > 1).mean() > 0.25  # the clip is exercised
        wealth = 1.0 - np.cumsum(inner)
        assert np.all(wealth >= 0.0)
        mag = 1.0 + np.abs(inner).sum()
        assert abs(model.state.scalars["wealth"] - wealth[-1]) <= 1e-12 * mag
        theta = model.algorithm.field(model.state, "theta")[: X.shape[1] + 1]
        close(theta, -ell.sum(axis=0), np.abs(ell).sum(axis=0), "theta")
        # the unclipped accounting gives another number: the clip was applied
        raw_inner = (np.maximum(np.sqrt((G**2).sum(axis=(1, 2))), 1.0) * inner).sum()  # Σ ⟨G_t, w_t⟩
        assert abs(model.state.scalars["wealth"] - (1.0 - raw_inner)) > 1e-3 * mag


def test_kt_coord_clips_each_coordinate_and_keeps_each_wealth_positive():
    rng = np.random.default_rng(6)
    X = features(rng, 200, 6, log10_scale=(-1.0, 3.0))
    y = labels(rng, X, "hinge")
    model = model_for("kt-coord", "hinge")
    scores = model.learn(X, y)
    ell, G, _ = clipped_losses(X, y, scores, "hinge", 1, per_coordinate=True)
    assert (np.abs(G) > 1).any()
    d = X.shape[1] + 1
    theta = model.algorithm.field(model.state, "theta")[:d]
    W = model.algorithm.field(model.state, "wealth")[:d]
    close(theta, -ell.sum(axis=0), np.abs(ell).sum(axis=0), "theta")
    assert np.all(W >= 0.0)


# -- OGD: the projection ---------------------------------------------------------
@pytest.mark.parametrize("name", ["ogd", "ogd-global"])
def test_ogd_projection_keeps_weights_in_the_box(name):
    rng = np.random.default_rng(8)
    X = features(rng, 80, 5)
    y = labels(rng, X, "hinge")
    R = 0.5
    model = model_for(name, "hinge", radius=R, scale=50.0)  # steps far outside the box
    ref = make_reference(name, X.shape[1] + 1, 1, {"radius": R, "scale": 50.0})
    at_edge = 0
    for row, label in zip(X, y):
        model.learn(row[None, :], [label])
        ref.step([1.0] + row.tolist(), float(label), "hinge")
        w = model.algorithm.field(model.state, "w")
        assert np.all(np.abs(w) <= R)
        at_edge += int(np.sum(np.abs(w) == R))
        close(w[: X.shape[1] + 1], ref.w, R, "w")
    assert at_edge > 0  # the projection did act


# -- kt-avg: offline predictions use the averaged iterate ---------------------------
def test_kt_avg_offline_uses_the_average_online_uses_w_t():
    rng = np.random.default_rng(9)
    X = features(rng, 240, 6)
    y = labels(rng, X, "logistic")
    train, test = slice(0, 150), slice(150, 200)
    want, scale, ref = reference_run("kt-avg", X[train], y[train], "logistic", 1, {})
    model = model_for("kt-avg", "logistic")
    assert_scores_match(model.learn(X[train], y[train]), want, scale)  # progressive: w_t

    Xt = np.column_stack([np.ones(50), X[test]])
    wbar = np.array(ref.averaged())[:, 0]  # literally (1/T) Σ w_t
    w_next = np.array(ref.current())[:, 0]
    before = {k: v.copy() for k, v in model.state.arrays.items()}, dict(model.state.scalars)
    got = model.decision_function(X[test])
    assert_scores_match(got[:, None], (Xt @ wbar)[:, None], (np.abs(Xt * wbar)).sum(axis=1)[:, None])
    assert np.abs(got - Xt @ w_next).max() > 1e-6 * np.abs(Xt * w_next).sum(axis=1).max()
    # offline prediction changes nothing
    for k, v in before[0].items():
        np.testing.assert_array_equal(model.state.arrays[k], v)
    assert model.state.scalars == before[1]
    # plain kt predicts offline with w_{T+1}
    kt = model_for("kt", "logistic")
    kt.learn(X[train], y[train])
    off = kt.decision_function(X[test])
    assert_scores_match(off[:, None], (Xt @ w_next)[:, None], np.abs(Xt * w_next).sum(axis=1)[:, None])
    # learning goes on from w_t, as if the offline predictions never happened
    rest = slice(200, 240)
    more = model.learn(X[rest], y[rest])
    want_more, scale_more = [], []
    for row, label in zip(X[rest], y[rest]):
        yhat, s, _ = ref.step([1.0] + row.tolist(), float(label), "logistic")
        want_more.append(yhat)
        scale_more.append(s)
    assert_scores_match(more, np.array(want_more), np.array(scale_more))


# -- regret bounds -----------------------------------------------------------------
def kt_streams():
    rng = np.random.default_rng(2016)
    n, d = 400, 4
    scales = 10.0 ** rng.uniform(-2, 2, size=d)
    X = rng.normal(size=(n, d)) * scales
    u = rng.normal(size=d) / scales
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-X @ u)), 1.0, -1.0)
    yield "random-logistic", X, y, "logistic"
    yield "random-hinge", X, y, "hinge"
    Xs = np.abs(X)
    yield "separable-hinge", Xs, np.ones(n), "hinge"  # ℓ_t in one orthant: the wealth grows fast
    Xl = X.copy()
    Xl[: n // 2, 2:] = 0.0
    yield "late-features-softmax", Xl, np.argmax(np.sign(Xl) @ rng.normal(size=(d, 3)), axis=1).astype(float), \
        "softmax"


def kt_bound(norm_u, T):
    return norm_u * math.sqrt(T * math.log1p(4 * T**2 * norm_u**2)) + 1.0


RADII = [0.0] + list(10.0 ** np.arange(-3.0, 4.5, 0.5))


@pytest.mark.parametrize("stream", list(kt_streams()), ids=lambda s: s[0])
@pytest.mark.parametrize("name", ["kt", "kt-avg"])
def test_kt_theorem1_regret_bound(stream, name):
    """Regret_T(u) = Σ ⟨ℓ_t, w_t − u⟩ ≤ ‖u‖ √(T ln(1 + 4T²‖u‖²)) + 1 for all T,
    for the worst comparator of each norm r (u = −r L_T/‖L_T‖, L_T = Σ ℓ),
    hence for every u of that norm, plus a few random ones."""
    _, X, y, loss = stream
    K = 3 if loss == "softmax" else 1
    model = model_for(name, loss)
    scores = np.asarray(model.learn(X, y)).reshape(len(X), K)
    ell, _, inner = clipped_losses(X, y, scores, loss, K)
    bets = inner
    inner = np.cumsum(bets)  # Σ_{t≤T} ⟨ℓ_t, w_t⟩
    L = np.cumsum(ell, axis=0)
    L_norm = np.sqrt((L**2).sum(axis=(1, 2)))
    T = np.arange(1, len(X) + 1)
    for r in RADII:
        regret = inner + r * L_norm
        bound = np.array([kt_bound(r, t) for t in T])
        assert np.all(regret <= bound + 1e-9 * (1 + np.abs(bound))), (r, int(np.argmax(regret - bound)))
    rng = np.random.default_rng(0)
    for _ in range(5):
        u = rng.normal(size=ell.shape[1:]) * 10.0 ** rng.uniform(-3, 3)
        regret = inner - (L * u).sum(axis=(1, 2))
        bound = np.array([kt_bound(np.linalg.norm(u), t) for t in T])
        assert np.all(regret <= bound + 1e-9 * (1 + np.abs(bound)))
    assert abs(model.state.scalars["wealth"] - (1.0 - inner[-1])) <= 1e-12 * (1 + np.abs(bets).sum())


@pytest.mark.parametrize("stream", list(kt_streams()), ids=lambda s: s[0])
def test_kt_coord_theorem1_per_coordinate(stream):
    """Each coordinate plays the one-dimensional game of Theorem 1 over all T
    trials: 1 − W_i − u_i L_i ≤ |u_i| √(T ln(1 + 4T²u_i²)) + 1, checked every 50 rows."""
    _, X, y, loss = stream
    model = model_for("kt-coord", loss)
    d = X.shape[1] + 1
    for stop in range(50, len(X) + 1, 50):
        model.learn(X[stop - 50: stop], y[stop - 50: stop])
        W = model.algorithm.field(model.state, "wealth")[:d]
        L = -model.algorithm.field(model.state, "theta")[:d]
        assert np.all(W >= 0.0)
        for r in RADII:
            regret = (1.0 - W) + r * np.abs(L)  # worst u_i = −r sgn(L_i)
            assert np.all(regret <= kt_bound(r, stop) + 1e-9 * kt_bound(r, stop))


def ogd_run(name, X, y, loss, R):
    """The kernel one row at a time: the points w_t it played and the gradients G_t = g_t x_t."""
    model = model_for(name, loss, radius=R, scale=1.0)
    d = X.shape[1] + 1
    played, grads = [], []
    for row, label in zip(X, y):
        played.append(model.algorithm.field(model.state, "w")[:d, 0].copy() if model.state is not None
                      else np.zeros(d))
        s = model.learn(row[None, :], [label])[0]
        grads.append(loss_grad(loss, float(label), [float(s)])[1][0] * np.concatenate([[1.0], row]))
    return model, np.array(played), np.array(grads)


def ogd_streams():
    rng = np.random.default_rng(2010)
    n, d = 300, 5
    scales = 10.0 ** rng.uniform(-2, 2, size=d)
    X = rng.normal(size=(n, d)) * scales
    u = rng.normal(size=d) / scales
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-X @ u)), 1.0, -1.0)
    yield "random-logistic", X, y, "logistic"
    yield "random-hinge", X, y, "hinge"
    Xl = X.copy()
    Xl[1: n // 2, 3:] = 0.0  # rare after the first row (all coordinates seen at t = 1)
    yield "rare-features-hinge", Xl, y, "hinge"


@pytest.mark.parametrize("stream", list(ogd_streams()), ids=lambda s: s[0])
@pytest.mark.parametrize("R", [0.01, 1.0, 100.0])
def test_ogd_theorem3_regret_bound(stream, R):
    """Streeter & McMahan 2010, "Less Regret via Online Conditioning", Theorem 3 with η_{t,i} = D_i/√(2 Σ_{s≤t} g_{s,i}²): for every
    coordinate and every T, Σ_t g_{t,i}(w_{t,i} − u_i) ≤ D_i √(2 Σ_t g_{t,i}²)
    for all u_i ∈ [−R, R] (checked at the worst, u_i = −R sgn Σ_t g_{t,i});
    summed, and ≤ D √(2 Σ_t ‖g_t‖²) (inequality (5)), D = 2R√n."""
    _, X, y, loss = stream
    _, w, G = ogd_run("ogd", X, y, loss, R)
    D_i = 2 * R
    gain = np.cumsum(G * w, axis=0)            # Σ_{t≤T} g_{t,i} w_{t,i}
    Gsum = np.cumsum(G, axis=0)
    regret_i = gain + R * np.abs(Gsum)         # worst comparator in the box
    bound_i = D_i * np.sqrt(2 * np.cumsum(G**2, axis=0))
    tol = 1e-9 * (bound_i + np.abs(gain))
    assert np.all(regret_i <= bound_i + tol)
    assert np.all(regret_i.sum(axis=1) <= bound_i.sum(axis=1) + tol.sum(axis=1))
    D = D_i * math.sqrt(X.shape[1] + 1)
    assert np.all(bound_i.sum(axis=1) <= D * np.sqrt(2 * np.cumsum((G**2).sum(axis=1))) * (1 + 1e-12))


@pytest.mark.parametrize("stream", list(ogd_streams()), ids=lambda s: s[0])
@pytest.mark.parametrize("R", [0.01, 1.0, 100.0])
def test_ogd_global_theorem2_regret_bound(stream, R):
    """Streeter & McMahan 2010, "Less Regret via Online Conditioning", Theorem 2: η_t = D/√(2 Σ_{s≤t} ‖g_s‖²) gives regret ≤
    D √(2 Σ_t ‖g_t‖²). The theorem takes D fixed; the learner estimates it
    from the coordinates seen, which is the true diameter 2R√n once every
    coordinate has been seen, here at t = 1 (so the theorem applies)."""
    _, X, y, loss = stream
    assert np.all(X[0] != 0)
    model, w, G = ogd_run("ogd-global", X, y, loss, R)
    n = X.shape[1] + 1
    assert model.state.scalars["dim"] == n
    D = 2 * R * math.sqrt(n)
    gain = np.cumsum((G * w).sum(axis=1))
    regret = gain + R * np.abs(np.cumsum(G, axis=0)).sum(axis=1)
    bound = D * np.sqrt(2 * np.cumsum((G**2).sum(axis=1)))
    assert np.all(regret <= bound + 1e-9 * (bound + np.abs(gain)))
