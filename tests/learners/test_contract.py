"""The contract every registered learner keeps, checked for each one:

- its compiled kernel gives the slow literal reference's predictions;
- batch boundaries change nothing (strictly online);
- unlabelled examples are predicted, not learned;
- a saved learner continues bit-identically after loading;
- it is scale-invariant exactly when it says so;
- split over K feature shards it equals one learner (coordinate-separable
  learners), or it refuses shards;
- it learns, and its parameters are validated by name.

The families' own files check what is particular to each (state fields
against the references, non-default parameters, the papers' inequalities).
"""

import numpy as np
import pytest

from learners import OnlineLearner, make_algorithm
from learners.sharding import ShardedLearner
from tests.support.compare import assert_scores_match
from tests.support.gen import to_csr
from tests.support.contract import INVARIANT, NAMES, PARAMS, cases, data, loss_for, model, reference_scores


@pytest.mark.parametrize("name,loss", cases(softmax=False) + [c for c in cases() if c[1] == "softmax"
                                                               and c[0] != "kotlowski1"])
@pytest.mark.parametrize("layout", ["dense", "csr-shuffled"])
def test_kernel_equals_the_slow_reference(name, loss, layout):
    rng, X, y = data(NAMES.index(name), loss, n=120, d=6, log10_scale=(-1.0, 1.0))
    y[::9] = np.nan  # unlabelled rows are predicted by both, learned by neither
    want, scale = reference_scores(name, X, y, loss)
    got = model(name, loss).learn(X if layout == "dense" else to_csr(X, rng), y)
    assert np.abs(want).max() > 0  # the reference did move
    rtol = 1e-12
    if name == "kotlowski2":
        # Its reference takes a pseudo-inverse by SVD: round-off relative to
        # the typical term (e.g. 1e-16, not 0, in a direction seen first).
        rtol, scale = 1e-8, np.maximum(scale, np.median(scale))
    assert_scores_match(got, want[:, 0] if want.shape[1] == 1 else want, scale[:, 0] if scale.shape[1] == 1
                        else scale, rtol)


@pytest.mark.parametrize("name,loss", cases())
def test_batches_split_anywhere_give_the_same_run(name, loss):
    _, X, y = data(3, loss, n=200, d=6)
    whole = model(name, loss).learn(X, y)
    split = model(name, loss)
    cuts = [0, 1, 2, 50, 51, 131, 200]
    parts = [split.learn(X[a:b], y[a:b]) for a, b in zip(cuts, cuts[1:])]
    np.testing.assert_array_equal(np.concatenate(parts), whole)


@pytest.mark.parametrize("name,loss", cases(softmax=False))
def test_unlabelled_examples_are_predicted_not_learned(name, loss):
    _, X, y = data(4, loss, n=150, d=5)
    gaps = y.copy()
    gaps[::3] = np.nan
    learner = model(name, loss)
    scores, losses = learner.learn(X, gaps, return_losses=True)
    keep = ~np.isnan(gaps)
    assert np.isnan(losses[~keep]).all() and not np.isnan(losses[keep]).any()
    assert learner.n_examples == int(keep.sum())
    np.testing.assert_array_equal(model(name, loss).learn(X[keep], y[keep]), scores[keep])


@pytest.mark.parametrize("name,loss", cases())
def test_saved_learner_continues_bit_identically(tmp_path, name, loss):
    _, X, y = data(1, loss, n=300, d=8)
    params = PARAMS.get(name, {})
    straight = model(name, loss, **params)
    want = straight.learn(X, y)
    first = model(name, loss, **params)
    head = first.learn(X[:120], y[:120])
    path = str(tmp_path / "m.scinol")
    first.save(path)
    second = OnlineLearner.load(path)
    assert second.algorithm.name == name and second.algorithm.params == {**first.algorithm.params, **params}
    assert second.n_examples == first.n_examples
    tail = second.learn(X[120:], y[120:])
    np.testing.assert_array_equal(np.concatenate([head, tail]), want)
    for key, arr in straight.state.arrays.items():
        n = min(arr.shape[0], second.state.arrays[key].shape[0])
        np.testing.assert_array_equal(second.state.arrays[key][:n], arr[:n], err_msg=key)
    assert second.state.scalars == straight.state.scalars


@pytest.mark.parametrize("name", NAMES)
def test_scale_invariance_is_as_declared(name):
    loss = loss_for(name)
    rng, X, y = data(5, loss, n=400, d=6, log10_scale=(-1.0, 1.0))
    a = 10.0 ** rng.uniform(-3, 3, size=X.shape[1])
    base = model(name, loss).learn(X, y)
    scaled = model(name, loss).learn(X * a, y)
    scale = np.maximum(np.abs(base), np.median(np.abs(base)) + 1e-300)
    same = bool(np.all(np.abs(scaled - base) <= 1e-9 * scale))
    assert make_algorithm(name).scale_invariant == (name in INVARIANT)
    assert same == (name in INVARIANT), f"{name}: invariant={same}, declared {name in INVARIANT}"


@pytest.mark.parametrize("name,loss", cases())
@pytest.mark.parametrize("k", [1, 3, 7])
def test_shards_equal_one_learner(name, loss, k):
    _, X, y = data(k, loss, n=250, d=10, log10_scale=(-1.0, 1.0))
    algorithm = make_algorithm(name)
    K = 3 if loss == "softmax" else 1
    if not algorithm.shardable:
        with pytest.raises(ValueError, match="not coordinate-separable"):
            ShardedLearner(algorithm, loss, k, n_outputs=K)
        return
    single = model(name, loss)
    want = single.learn(X, y)
    sharded = ShardedLearner(algorithm, loss, k, n_outputs=K)
    np.testing.assert_allclose(sharded.learn(to_csr(X), y), want, rtol=1e-9, atol=1e-12)
    merged = sharded.merged_state(single.state.n_coords)
    for key, arr in single.state.arrays.items():
        np.testing.assert_allclose(merged.arrays[key], arr, rtol=1e-9, atol=1e-12, err_msg=key)
    assert merged.scalars == pytest.approx(single.state.scalars, rel=1e-12)


@pytest.mark.parametrize("name,loss", cases())
def test_block_calls_equal_row_calls_bit_for_bit(name, loss):
    """A shard predicts a block of events in one call (predict_rows) and
    updates a run of them in one (update_rows), and the Combiner combines a
    run in one (combine_rows): the same arithmetic as predict / combine /
    update event by event, here with coordinates repeated across rows,
    zeros, unlabelled rows, weights 0 and 2.5, each row's own scalars and
    feedback."""
    from learners.losses import loss_code, prepare_labels

    algorithm = make_algorithm(name)
    if not algorithm.shardable:
        return
    rng, X, y = data(5, loss, n=60, d=6, log10_scale=(-1.0, 1.0))
    warm = model(name, loss)
    warm.learn(X[:40], y[:40])
    state = warm.state
    n, K = 9, state.arrays["P"].shape[1]
    lengths = rng.integers(0, 5, size=n)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    indices = rng.integers(0, state.n_coords, size=indptr[-1]).astype(np.int64)
    data_ = np.where(rng.random(indptr[-1]) < 0.2, 0.0, rng.normal(size=indptr[-1]) * 3.0)
    learning = rng.random(n) < 0.8
    labels_ = prepare_labels(loss, y[40:40 + n], K)

    def rows(i):
        return indices[indptr[i]:indptr[i + 1]], data_[indptr[i]:indptr[i + 1]]

    scalars = dict(state.scalars)
    one = [algorithm.predict(state, *rows(i), False, scalars, bool(learning[i])) for i in range(n)]
    sums, memo = algorithm.predict_rows(state, indptr, indices, data_, scalars, learning)
    np.testing.assert_array_equal(sums, np.array([s for s, _ in one]))

    feedback, globs, at, combined = [], [], [], []
    y_rows = np.where(learning, labels_, np.nan)
    weights = np.ones(n)
    weights[np.flatnonzero(learning)[:2]] = (0.0, 2.5)  # on labelled rows, where a weight counts
    before = dict(scalars)
    for i in range(n):  # the Combiner's work: each row's feedback, and the scalars after it
        yhat, value, fb = algorithm.combine(scalars, one[i][0], y_rows[i], loss_code(loss), 0.0, weights[i])
        feedback.append(fb)
        globs.append([scalars[name] for name in algorithm.scalar_names])
        at.append(dict(scalars))
        combined.append((yhat, value))
    yhats, values, fbs_, learned, globs_ = algorithm.combine_rows(before, sums, y_rows, loss_code(loss), 0.0, weights)
    np.testing.assert_array_equal(yhats, np.array([c[0] for c in combined]))
    np.testing.assert_array_equal(values, np.array([c[1] for c in combined]))  # NaN where unlabelled
    assert learned.tolist() == [f is not None for f in feedback]
    for i in np.flatnonzero(learned):
        np.testing.assert_array_equal(fbs_[i], feedback[i])
    np.testing.assert_array_equal(globs_, np.array(globs))
    assert before == scalars
    by_row = state.copy()
    for i in range(n):
        if feedback[i] is not None:
            algorithm.update(by_row, *rows(i), False, at[i], feedback[i], one[i][1])
    width = max(len(f) for f in feedback if f is not None)
    fbs = np.array([np.zeros(width) if f is None else f for f in feedback])
    has = np.array([f is not None for f in feedback])
    by_block = state.copy()  # in two runs, as feedback comes: rows 0-1, then the rest (a window of the block)
    algorithm.update_rows(by_block, indptr[:3], indices, data_, np.array(globs[:2]), fbs[:2], has[:2], memo, 0)
    algorithm.update_rows(by_block, indptr[2:], indices, data_, np.array(globs[2:]), fbs[2:], has[2:], memo, 2)
    assert has.any() and not has.all()
    for key, arr in by_row.arrays.items():
        np.testing.assert_array_equal(by_block.arrays[key], arr, err_msg=key)
    assert not all(np.array_equal(arr, state.arrays[key]) for key, arr in by_row.arrays.items())  # it learned


@pytest.mark.parametrize("name", NAMES)
def test_every_learner_learns_something(name):
    rng = np.random.default_rng(9)
    X = rng.normal(size=(3000, 4))
    u = np.array([1.0, -2.0, 0.5, 0.0])
    loss = loss_for(name)
    y = X @ u if loss in ("squared", "epsilon_insensitive") else np.where(X @ u > 0, 1.0, -1.0)
    _, losses = model(name, loss).learn(X, y, return_losses=True)
    assert np.mean(losses[-500:]) < 0.7 * np.mean(losses[:100]), name


@pytest.mark.parametrize("name", NAMES)
def test_parameters_are_validated_by_name(name):
    for param in make_algorithm(name).params:
        with pytest.raises(ValueError, match=param):
            model(name, loss_for(name), **{param: float("nan")})
