"""scinol-mix (learners/mixture.py): the Bayes mixture's guarantee and what
is particular to it. The registry-wide contract (kernel = slow reference,
batches, unlabelled rows, checkpoints, shards, weights) runs it through
tests/learners/test_contract.py and test_weights.py like any learner.

- Each base learns exactly as it would alone: L_i, the mixture's record of
  base i's cumulative loss, is the standalone learner's total loss.
- The Bayes mixture's identity Σ_t ℓ_t(mix) = -ln (1/N) Σ_i exp(-L_i)
  (Cesa-Bianchi & Lugosi 2006, §9.2), hence the regret bound ≤ ln N against
  the best base and the zero model, on random and adversarial streams.
- Scale invariance exactly when every base is (kt=0).
- A base whose potential overflows drops out; the mixture stays finite.
"""

import math

import numpy as np
import pytest

from learners import OnlineLearner, make_learner
from learners.mixture import BASES, EXPERTS, FIELDS, WIDE_EPS
from tests.reference.mix import CentredScInOL2
from tests.support.gen import features, labels, to_csr


def stream(seed, loss, kind, n=600, d=8):
    rng = np.random.default_rng(seed)
    X = features(rng, n, d, log10_scale=(-1.0, 1.0))
    y = labels(rng, X, loss)
    if kind == "adversarial":
        X[:, 0] *= 1e150  # huge and tiny scales side by side
        X[:, 4] *= 1e-150
        X[::5] = 0.0  # all-zero rows: only the bias sees them
        flip = np.arange(n) >= n // 2  # the concept flips half-way
        y = np.where(flip, -y if loss == "logistic" else (y + 1) % 3, y)
    return X, y


ALL = {"kt": 1.0, "scinol1": 1.0, "kotlowski1": 1.0, "center": 1.0, "wide": 1.0}
"""Every expert on (the default is ScInOL2, centred ScInOL2, wide ScInOL2 and zero)."""


def mix(loss, **params):
    return make_learner("scinol-mix", loss, n_classes=3 if loss == "softmax" else None, **params)


@pytest.mark.parametrize("loss", ["logistic", "softmax"])
@pytest.mark.parametrize("kind", ["random", "adversarial"])
def test_bases_learn_as_alone_and_the_regret_is_at_most_ln_n(loss, kind):
    X, y = stream(11, loss, kind)
    # KT is not scale-invariant: at feature scales of 1e150 its scores are
    # ~1e149, where the shared loss (ln Σ e^{ŷ-top} + top - ŷ_y) rounds ln 2
    # away, so its L_i is not the -ln p_i(y) the identity sums. The other
    # bases' scores do not scale, so without KT the identity is exact.
    on = kind == "random"
    learner = mix(loss, **{**ALL, "kt": float(on)})
    _, losses = learner.learn(to_csr(X), y, return_losses=True)
    L = np.array([learner.state.scalars[f"L_{e}"] for e in EXPERTS if on or e != "kt-coord"])
    for name, total in zip([b for b in BASES if on or b != "kt-coord"], L):
        if name == "scinol2-centred":  # not a learner of its own: its literal reference
            alone = CentredScInOL2(X.shape[1] + 1, 3 if loss == "softmax" else 1, learner.algorithm.params["eps"])
            own = np.array([alone.step([1.0] + x.tolist(), float(label), loss)[2] for x, label in zip(X, y)])
        else:
            eps = learner.algorithm.params["eps"] * (WIDE_EPS if name == "scinol2-wide" else 1.0)
            alone = make_learner(name.removesuffix("-wide"), loss, n_classes=3 if loss == "softmax" else None,
                                 **({"eps": eps} if name.startswith("scinol") else {}))
            _, own = alone.learn(to_csr(X), y, return_losses=True)
        assert total == pytest.approx(own.sum(), rel=1e-12), name
    assert L[-1] == pytest.approx(len(y) * math.log(3 if loss == "softmax" else 2), rel=1e-12)
    n = len(L)
    identity = -(np.logaddexp.reduce(-L) - math.log(n))
    assert losses.sum() == pytest.approx(identity, rel=1e-10)
    assert losses.sum() <= L.min() + math.log(n) + 1e-9 * L.min()
    assert losses.sum() < L[-1]  # below the zero model's: ln N is far less than what the best base gains here


@pytest.mark.parametrize("loss", ["logistic", "softmax"])
def test_weighted_regret_bound_holds_for_weights_up_to_one(loss):
    rng = np.random.default_rng(3)
    X, y = stream(12, loss, "random")
    h = rng.uniform(0.0, 1.0, size=len(y))
    learner = mix(loss, **ALL)
    _, losses = learner.learn(X, y, h, return_losses=True)
    L = np.array([learner.state.scalars[f"L_{e}"] for e in EXPERTS])
    assert np.dot(h, losses) <= L.min() + math.log(len(EXPERTS)) + 1e-9 * L.min()


@pytest.mark.parametrize("loss", ["logistic", "softmax"])
def test_scale_invariant_exactly_when_every_base_is(loss):
    X, y = stream(13, loss, "random", n=400)
    k = np.random.default_rng(0).integers(-40, 40, size=X.shape[1])
    scaled = X * 2.0 ** k  # exact in floating point
    invariant = mix(loss, **{**ALL, "kt": 0.0})  # centring too: x - μ scales with x
    assert invariant.algorithm.scale_invariant and not mix(loss, **ALL).algorithm.scale_invariant
    assert mix(loss).algorithm.scale_invariant  # the default set
    np.testing.assert_allclose(mix(loss, **{**ALL, "kt": 0.0}).learn(scaled, y), invariant.learn(X, y), rtol=1e-12,
                               atol=1e-300)
    np.testing.assert_allclose(mix(loss).learn(scaled, y), mix(loss).learn(X, y), rtol=1e-12, atol=1e-300)
    assert not np.allclose(mix(loss, **ALL).learn(scaled, y), mix(loss, **ALL).learn(X, y), rtol=1e-6)


def test_without_kt_there_are_six_experts():
    X, y = stream(14, "logistic", "random")
    learner = mix("logistic", **{**ALL, "kt": 0.0})
    _, losses = learner.learn(X, y, return_losses=True)
    L = np.array([learner.state.scalars[f"L_{e}"] for e in EXPERTS if e != "kt-coord"])
    assert learner.state.scalars["L_kt-coord"] == 0.0 and not learner.state.arrays["P"][:, :, FIELDS.index("theta")].any()
    assert len(L) == 6 and losses.sum() == pytest.approx(-(np.logaddexp.reduce(-L) - math.log(6)), rel=1e-10)
    assert learner.algorithm.expert_weights(learner.state)[2] == 0.0


def test_an_overflowing_base_drops_out_and_the_mixture_stays_finite(tmp_path):
    X, y = stream(15, "logistic", "random", n=300)
    h = np.where(np.arange(len(y)) % 3 == 0, 1e3, 1.0)  # Kotłowski's exp(h²/(2α s²)) overflows
    learner = mix("logistic", kotlowski1=1.0)
    scores, losses = learner.learn(X, y, h, return_losses=True)
    alone = make_learner("kotlowski1").learn(X, y, h)
    assert not np.isfinite(alone).all()  # the base alone does blow up
    assert np.isfinite(scores).all() and np.isfinite(losses).all()
    assert learner.algorithm.expert_weights(learner.state)[3] == 0.0
    learner.save(str(tmp_path / "m.scinol"))  # the state stays finite, so it saves and loads
    again = OnlineLearner.load(str(tmp_path / "m.scinol"))
    np.testing.assert_array_equal(again.learn(X[:20], y[:20]), learner.learn(X[:20], y[:20]))


def test_only_log_losses_and_the_weights_of_the_linear_bases():
    with pytest.raises(ValueError, match="logistic and softmax losses, not hinge"):
        make_learner("scinol-mix", "hinge")
    with pytest.raises(ValueError, match="kt must be 0 or 1"):
        make_learner("scinol-mix", kt=0.5)
    X, y = stream(16, "logistic", "random")
    learner = mix("logistic", **ALL)
    learner.learn(X, y)
    pi = learner.algorithm.expert_weights(learner.state)
    assert pi.sum() == pytest.approx(1.0) and (pi >= 0).all() and pi[BASES.index("scinol2-centred")] > 0
    eps = learner.algorithm.params["eps"]
    per_base = [make_learner(name, **({"eps": eps} if name.startswith("scinol") else {})) for name in BASES[:4]]
    for b in per_base:
        b.learn(X, y)
    want = sum(p * b.weights() for p, b in zip(pi, per_base))
    centred = CentredScInOL2(X.shape[1] + 1, 1, eps)  # its weights are on x - μ
    for x, label in zip(X, y):
        centred.step([1.0] + x.tolist(), float(label), "logistic")
    want = want + pi[4] * np.array(centred.base._weights([0.0] * (X.shape[1] + 1), len(y) + 1)[0])
    wide = make_learner("scinol2", eps=WIDE_EPS * eps)
    wide.learn(X, y)
    want = want + pi[5] * wide.weights()
    np.testing.assert_allclose(learner.weights(), want, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("loss", ["logistic", "softmax"])
@pytest.mark.parametrize("off", [("scinol1", "kotlowski1"), ("kt", "scinol1", "kotlowski1"), ("kt",), ("center",),
                                 ("kt", "scinol1", "kotlowski1", "center")])
def test_bases_left_out_match_the_reference_and_shrink_n(loss, off):
    from tests.support.contract import data
    from tests.reference import make_reference
    from tests.support.compare import assert_scores_match

    params = {**ALL, **{name: 0.0 for name in off}}
    rng, X, y = data(21, loss, n=120, d=6, log10_scale=(-1.0, 1.0))
    K = 3 if loss == "softmax" else 1
    ref = make_reference("scinol-mix", X.shape[1] + 1, loss, K, **params)
    rows = [ref.step([1.0] + x.tolist(), float(label)) for x, label in zip(X, y)]
    want = np.array([r[0] for r in rows]).reshape(len(rows), K)
    scale = np.array([r[1] for r in rows]).reshape(len(rows), K)
    learner = mix(loss, **params)
    got, losses = learner.learn(to_csr(X, rng), y, return_losses=True)
    assert_scores_match(got, want[:, 0] if K == 1 else want, scale[:, 0] if K == 1 else scale, 1e-12)
    names = {"kt": "kt-coord", "center": "scinol2-centred"}
    left = [e for e in EXPERTS if e not in {names.get(o, o) for o in off}]
    L = np.array([learner.state.scalars[f"L_{e}"] for e in left])
    assert losses.sum() == pytest.approx(-(np.logaddexp.reduce(-L) - math.log(len(left))), rel=1e-10)
    pi = learner.algorithm.expert_weights(learner.state)
    assert pi.sum() == pytest.approx(1.0) and all(pi[EXPERTS.index(names.get(o, o))] == 0.0 for o in off)


def _reference_run(loss, X, y, **params):
    from tests.reference import make_reference

    K = 3 if loss == "softmax" else 1
    ref = make_reference("scinol-mix", X.shape[1] + 1, loss, K, **params)
    rows = [ref.step([1.0] + x.tolist(), float(label)) for x, label in zip(X, y)]
    shape = (len(rows), K)
    return np.array([r[0] for r in rows]).reshape(shape), np.array([r[1] for r in rows]).reshape(shape)


@pytest.mark.parametrize("loss", ["logistic", "softmax"])
@pytest.mark.parametrize("off", [(), ("scinol1", "kotlowski1"), ("kt", "scinol1", "kotlowski1")])
def test_averaged_iterates_score_unlabelled_rows_as_the_reference(loss, off):
    """average=1: an unlabelled row is scored with (1/T) Σ_{t≤T} w_t of each
    base (the reference keeps every iterate; the kernel sums lazily)."""
    from tests.support.contract import data
    from tests.support.compare import assert_scores_match

    params = {"average": 1.0, **ALL, **{name: 0.0 for name in off}}
    rng, X, y = data(31, loss, n=150, d=6, log10_scale=(-1.0, 1.0))
    y[::4] = np.nan
    y[:3] = np.nan  # before any learning: the mean of no iterates is 0
    want, scale = _reference_run(loss, X, y, **params)
    got = mix(loss, **params).learn(to_csr(X, rng), y)
    K = want.shape[1]
    assert_scores_match(got, want[:, 0] if K == 1 else want, scale[:, 0] if K == 1 else scale, 1e-10)
    online = mix(loss, **{**ALL, **{name: 0.0 for name in off}}).learn(X, y)
    labelled = ~np.isnan(y)
    np.testing.assert_array_equal(mix(loss, **params).learn(X, y)[labelled], online[labelled])  # progressive: online
    assert not np.allclose(got[~labelled][3:], online[~labelled][3:])  # test-time rows do change


def test_averaged_mixture_shards_and_checkpoints(tmp_path):
    from learners import make_algorithm
    from learners.sharding import ShardedLearner

    X, y = stream(32, "logistic", "random", n=300)
    y[::5] = np.nan
    single = mix("logistic", average=1.0)
    want = single.learn(X, y)
    sharded = ShardedLearner(make_algorithm("scinol-mix", average=1.0), "logistic", 3)
    np.testing.assert_allclose(sharded.learn(to_csr(X), y), want, rtol=1e-9, atol=1e-12)
    head = mix("logistic", average=1.0)
    head.learn(X[:120], y[:120])
    head.save(str(tmp_path / "m.scinol"))
    tail = OnlineLearner.load(str(tmp_path / "m.scinol")).learn(X[120:], y[120:])
    np.testing.assert_array_equal(tail, want[120:])


# -- the running-mean-centred ScInOL2 ---------------------------------------------
def _offset_stream(seed, loss, n=300, d=5):
    """Features with offsets far above their spread (as iris's and wine's),
    positive so no entry is 0."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, d))
    y = labels(rng, Z, loss)
    return Z + 10.0 ** rng.uniform(1, 4, size=d), y


@pytest.mark.parametrize("loss", ["logistic", "softmax"])
@pytest.mark.parametrize("kind", ["random", "adversarial", "weighted"])
def test_centred_expert_equals_its_reference(loss, kind):
    """Kernel = literal reference with the centred expert alone beside the
    zero model and with every expert: huge and tiny scales, all-zero rows,
    sparse rows (absent = 0 = not centred), unlabelled rows (means not
    moved), importance weights (means weighted by h)."""
    from tests.support.compare import assert_scores_match

    rng = np.random.default_rng(41)
    X, y = stream(41, loss, "adversarial" if kind == "adversarial" else "random", n=200, d=6)
    y[rng.random(len(y)) < 0.2] = np.nan
    h = rng.uniform(0.0, 1.0, size=len(y)) if kind == "weighted" else np.ones(len(y))
    K = 3 if loss == "softmax" else 1
    for params in ({"center": 1.0}, {**ALL, "kt": 0.0}, {"center": 1.0, "average": 1.0}):
        from tests.reference import make_reference

        ref = make_reference("scinol-mix", X.shape[1] + 1, loss, K, **params)
        rows = [ref.step([1.0] + x.tolist(), float(label), float(w)) for x, label, w in zip(X, y, h)]
        want = np.array([r[0] for r in rows]).reshape(len(rows), K)
        scale = np.array([r[1] for r in rows]).reshape(len(rows), K)
        got = mix(loss, **params).learn(to_csr(X, rng), y, h)
        assert_scores_match(got, want[:, 0] if K == 1 else want, scale[:, 0] if K == 1 else scale, 1e-10)


@pytest.mark.parametrize("loss", ["logistic", "softmax"])
def test_centring_removes_offsets_and_keeps_scale_invariance(loss):
    """Shifting every feature leaves the centred expert's losses nearly
    unchanged (x - μ is the same); rescaling
    by powers of 2 changes neither (exactly)."""
    X, y = _offset_stream(42, loss)
    shifted = X + 1e3 * np.arange(1, X.shape[1] + 1)
    runs = {}
    for name, data in (("raw", X), ("shifted", shifted)):
        learner = mix(loss)
        learner.learn(data, y)
        runs[name] = {e: learner.state.scalars[f"L_{e}"] for e in EXPERTS}
    # Not exact: a coordinate is centred from its second distinct value on,
    # so the first two rows' scores (hence the bias's learning) differ.
    assert runs["shifted"]["scinol2-centred"] == pytest.approx(runs["raw"]["scinol2-centred"], rel=1e-4)
    assert runs["shifted"]["scinol2-centred"] < 0.8 * runs["shifted"]["scinol2"]  # raw ScInOL2 is lost there
    k = np.random.default_rng(0).integers(-40, 40, size=X.shape[1])
    np.testing.assert_array_equal(mix(loss).learn(X * 2.0 ** k, y), mix(loss).learn(X, y))


@pytest.mark.parametrize("loss", ["logistic", "softmax"])
def test_centring_pays_on_offset_features(loss):
    """On features whose offsets dwarf their spread, the centred expert
    loses far less than raw ScInOL2, and the mixture follows it."""
    X, y = _offset_stream(43, loss, n=600)
    learner = mix(loss)
    _, losses = learner.learn(X, y, return_losses=True)
    L = {e: learner.state.scalars[f"L_{e}"] for e in EXPERTS}
    assert L["scinol2-centred"] < 0.8 * min(L["scinol2"], L["zero"])
    assert losses.sum() <= L["scinol2-centred"] + math.log(4) + 1e-9 * L["zero"]


def test_the_centred_expert_shards_and_checkpoints(tmp_path):
    """μ is per coordinate: shards keep their coordinates' means, weighted by
    the h the combiner hands back; a checkpoint carries them."""
    from learners import make_algorithm
    from learners.sharding import ShardedLearner

    X, y = _offset_stream(44, "logistic")
    X[::7, 2] = 0.0  # absent entries on one coordinate
    h = np.random.default_rng(1).uniform(0.2, 1.0, size=len(y))
    want = mix("logistic").learn(X, y, h)
    sharded = ShardedLearner(make_algorithm("scinol-mix"), "logistic", 3)
    np.testing.assert_allclose(sharded.learn(to_csr(X), y, h), want, rtol=1e-9, atol=1e-12)
    head = mix("logistic")
    head.learn(X[:120], y[:120], h[:120])
    head.save(str(tmp_path / "m.scinol"))
    tail = OnlineLearner.load(str(tmp_path / "m.scinol")).learn(X[120:], y[120:], h[120:])
    np.testing.assert_array_equal(tail, want[120:])
