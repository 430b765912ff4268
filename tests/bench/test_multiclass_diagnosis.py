"""The multiclass diagnosis's numpy re-derivation of ScInOL2 must be the
shipped learner (else its variants compare against the wrong baseline)."""

import numpy as np

from learners import make_learner
from pipelines.bench.multiclass_diagnosis import run_kernel, run_numpy


def blobs(n=300, k=3, d=4, seed=0):
    """K Gaussian classes with a large common offset, like raw iris."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    centres = rng.normal(size=(k, d)) * [1.0, 10.0, 0.1, 3.0]
    X = centres[y] + rng.normal(size=(n, d)) * [0.5, 5.0, 0.05, 1.5] + [5.0, 50.0, 0.5, 15.0]
    return X, y


def test_numpy_per_class_scinol2_is_the_kernel():
    X, y = blobs()
    _, e_np, l_np = run_numpy("scinol2", X, y, 3)
    model, e_k, l_k = run_kernel("scinol2", X, y, 3, {})
    np.testing.assert_allclose(l_np, l_k, rtol=1e-9, atol=1e-12)
    assert (e_np == e_k).all()
    assert np.abs(model.weights()).max() > 0.05  # the weights moved: the comparison is not of zeros


def test_variants_differ_from_the_shipped_learner():
    X, y = blobs(seed=1)
    _, _, base = run_numpy("scinol2", X, y, 3)
    for kind in ("shared-S2", "ovr"):
        _, _, other = run_numpy(kind, X, y, 3)
        assert np.abs(other - base).max() > 1e-3, kind


def test_numpy_model_keeps_learning_across_passes():
    X, y = blobs(seed=2)
    model, _, first = run_numpy("scinol2", X, y, 3)
    _, _, second = run_numpy("scinol2", X, y, 3, model)
    kernel = make_learner("scinol2", "softmax", n_classes=3)
    kernel.learn(X, y.astype(float))
    _, _, second_k = run_kernel("scinol2", X, y, 3, {}, kernel)
    np.testing.assert_allclose(second, second_k, rtol=1e-9, atol=1e-12)
    assert second.mean() < first.mean()


def test_running_centring_uses_only_rows_seen_so_far():
    from pipelines.bench.multiclass_diagnosis import running_centred

    X, _ = blobs(n=50)
    Xc = running_centred(X)
    assert (Xc[0] == 0).all()
    for t in (1, 17, 49):
        np.testing.assert_allclose(Xc[t], X[t] - X[: t + 1].mean(0), rtol=1e-12)
    Y = X.copy()
    Y[30:] += 1000.0  # later rows cannot change earlier ones
    np.testing.assert_array_equal(running_centred(Y)[:30], Xc[:30])


def test_scinol2_softmax_is_scale_invariant_not_shift_invariant():
    """The diagnosis's finding in small: rescaling each feature changes
    nothing, while the large common offset keeps the one-pass loss near
    ln 3 and centring with the running mean removes most of it."""
    from pipelines.bench.multiclass_diagnosis import running_centred

    for seed in range(3):
        X, y = blobs(seed=seed)
        raw = run_kernel("scinol2", X, y, 3, {})[2]
        scaled = run_kernel("scinol2", X * [1.0, 100.0, 0.01, 7.0], y, 3, {})[2]
        centred = run_kernel("scinol2", running_centred(X), y, 3, {})[2]
        np.testing.assert_allclose(scaled, raw, rtol=1e-9, atol=1e-12)
        assert raw.mean() > 0.9
        assert centred.mean() < 0.5 * raw.mean()
