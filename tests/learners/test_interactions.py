"""Feature interactions (learners/interactions.py): the compiled crosses
against a slow reference, against explicitly crossed features (bit for bit),
scale invariance through the crosses, and the model header."""

import struct

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learners import OnlineLearner, make_learner
from learners.interactions import (DEFAULT_NAMESPACE, NamespacedRows, expand, named_rows, namespace_of,
                                   normalize_interactions)
from learners.jit import njit  # lazy, as the kernels it calls: numba's own would meet them uncompiled
from learners.murmur import murmur3_bytes, murmur3_words
from tests.reference.interactions import cross_row
from tests.support.gen import labels

SPACES = np.frombuffer(b"ab c", dtype=np.uint8)


@njit
def _hash_bytes(buf, seed):
    return murmur3_bytes(buf, 0, buf.shape[0], seed)


@njit
def _hash_words(words, n, seed):
    return murmur3_words(words, n, seed)


def test_compiled_murmur3_is_mmh3():
    rng = np.random.default_rng(0)
    for length in range(0, 33):
        for _ in range(10):
            data = rng.integers(0, 256, length, dtype=np.uint8)
            seed = int(rng.integers(0, 2**32))
            assert _hash_bytes(data, seed) == mmh3.hash(data.tobytes(), seed, signed=False)
    for n in (1, 2, 3):
        words = rng.integers(0, 2**32, 3).astype(np.uint64)
        packed = struct.pack(f"<{n}I", *words[:n].tolist())
        assert _hash_words(words, n, 7) == mmh3.hash(packed, 7, signed=False)


def test_normalize_sorts_letters_and_drops_repeats():
    assert normalize_interactions(["ba", "ab", "cba", "aab", "aba"]) == ("ab", "abc", "aab")
    assert normalize_interactions(None) == ()


@pytest.mark.parametrize("bad", ["a", "abcd", "a:", "a|", "aé", 12])
def test_normalize_refuses_bad_interactions(bad):
    with pytest.raises(ValueError, match="interaction"):
        normalize_interactions([bad])


def test_normalize_refuses_a_bare_string():
    with pytest.raises(ValueError, match="list of strings"):
        normalize_interactions("ab")


def test_namespace_of_names():
    assert namespace_of("a^x") == ord("a")
    assert namespace_of("ads^x^y") == ord("a")
    assert namespace_of("x") == DEFAULT_NAMESPACE
    assert namespace_of("^x^y") == DEFAULT_NAMESPACE
    assert namespace_of("é^x") == "é".encode()[0]


def random_rows(rng, n_rows=6, max_len=8, index_range=6):
    lens = rng.integers(0, max_len, n_rows)
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    nnz = int(indptr[-1])
    return NamespacedRows(indptr, rng.integers(0, index_range, nnz).astype(np.int64), rng.normal(size=nnz),
                          rng.choice(SPACES, nnz))


def reference_rows(rows, interactions, bits, seed):
    out = []
    for r in range(rows.n_rows):
        lo, hi = rows.indptr[r], rows.indptr[r + 1]
        entries = list(zip(rows.namespaces[lo:hi].tolist(), rows.indices[lo:hi].tolist(), rows.data[lo:hi].tolist()))
        out.append(cross_row(entries, interactions, bits, seed))
    return out


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1),
       specs=st.lists(st.sampled_from(["ab", "aa", "abc", "aab", "ba", " a", "bbb", "cca", "  "]), max_size=4),
       bits=st.integers(2, 12))
def test_expand_matches_the_reference(seed, specs, bits):
    rng = np.random.default_rng(seed)
    rows = random_rows(rng)
    interactions = normalize_interactions(specs)
    indptr, indices, data = expand(rows, interactions, bits, seed % 1000)
    got = [list(zip(indices[indptr[r]:indptr[r + 1]].tolist(), data[indptr[r]:indptr[r + 1]].tolist()))
           for r in range(rows.n_rows)]
    assert got == reference_rows(rows, interactions, bits, seed % 1000)
    for r in range(rows.n_rows):  # what lets crossed_batch skip the look for repeated indices
        row = indices[indptr[r]:indptr[r + 1]]
        assert np.unique(row).size == row.size


def test_self_interactions_make_each_combination_once():
    rows = NamespacedRows(np.array([0, 3]), np.array([1, 2, 3]), np.array([1.0, 2.0, 3.0]), SPACES[[0, 0, 0]])
    indptr, _, _ = expand(rows, ("aa",), 20)
    assert indptr[-1] == 3 + 6  # 3 features, (1,1) (1,2) (1,3) (2,2) (2,3) (3,3)
    indptr, _, _ = expand(rows, ("aaa",), 20)
    assert indptr[-1] == 3 + 10
    indptr, _, _ = expand(rows, ("ab",), 20)
    assert indptr[-1] == 3  # no b: no crosses


def explicit_rows(rows, interactions, bits, seed):
    """The crossed rows as plain CSR built by the reference: the same hashed indices."""
    crossed = reference_rows(rows, interactions, bits, seed)
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in crossed])]).astype(np.int64)
    indices = np.array([i for r in crossed for i, _ in r], dtype=np.int64)
    data = np.array([v for r in crossed for _, v in r])
    return indptr, indices, data


@pytest.mark.parametrize("algo", ["scinol2", "scinol1", "adagrad"])
def test_interactions_equal_explicit_crosses_bit_for_bit(algo):
    rng = np.random.default_rng(3)
    rows = random_rows(rng, n_rows=400, max_len=7, index_range=50)
    y = np.where(rng.random(400) < 0.5, 1.0, -1.0)
    interactions = ("ab", "abc", "aa")
    crossing = make_learner(algo, "logistic", hash_bits=12, hash_seed=5, interactions=list(interactions))
    plain = make_learner(algo, "logistic", hash_bits=12, hash_seed=5)
    got = crossing.learn(rows, y)
    want = plain.learn(explicit_rows(rows, interactions, 12, 5), y)
    assert np.abs(want).max() > 0
    assert np.array_equal(got, want)
    assert np.array_equal(crossing.weights(), plain.weights())


def test_dict_rows_cross_by_their_names_namespaces():
    rows = [{"a^x": 1.5, "b^y": -2.0, "c^z": 0.5, "w": 3.0}, {"a^x": -1.0, "b^q": 1.0, "b^y": 4.0}]
    model = make_learner("scinol2", "squared", interactions=["ab", "abc"])
    named = named_rows(rows, model.hasher)
    assert named.namespaces.tolist() == [97, 98, 99, 32, 97, 98, 98]
    got = model.learn(rows, [1.0, -2.0])
    plain = make_learner("scinol2", "squared")
    want = plain.learn(explicit_rows(named, ("ab", "abc"), model.hasher.bits, model.hasher.seed), [1.0, -2.0])
    assert np.array_equal(got, want)


def test_dense_input_is_the_default_namespace():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(50, 4))
    y = np.where(rng.random(50) < 0.5, 1.0, -1.0)
    crossing = make_learner("scinol2", "logistic", interactions=["  "])
    got = crossing.learn(X, y)
    r, c = np.nonzero(X)
    rows = NamespacedRows(np.arange(0, 201, 4), c.astype(np.int64), X[r, c], np.full(200, 32, dtype=np.uint8))
    want = make_learner("scinol2", "logistic").learn(explicit_rows(rows, ("  ",), 18, 0), y)
    assert np.array_equal(got, want)
    # without a default-namespace interaction nothing is crossed
    assert np.array_equal(make_learner("scinol2", "logistic", interactions=["ab"]).learn(X, y),
                          make_learner("scinol2", "logistic").learn(X, y))


@pytest.mark.parametrize("algo", ["scinol1", "scinol2"])
def test_rescaling_a_base_feature_rescales_its_crosses_and_keeps_predictions(algo):
    """Kempka et al. 2019 scale invariance, through the crosses: feature a^x
    scaled by c scales every cross it is in by c, one coordinate each."""
    rng = np.random.default_rng(7)
    n = 3000
    rows = []
    for _ in range(n):
        row = {f"a^{k}": rng.normal() * 10.0 ** k for k in range(3) if rng.random() < 0.8}
        row.update({f"b^{k}": rng.normal() for k in range(3) if rng.random() < 0.7})
        row["c^0"] = rng.normal()
        rows.append(row)
    X = np.array([[r.get(f"a^{k}", 0.0) for k in range(3)] + [r.get(f"b^{k}", 0.0) for k in range(3)] for r in rows])
    y = labels(rng, X, "logistic")
    interactions = ["ab", "abc"]
    model = make_learner(algo, "logistic", interactions=interactions)
    # the invariance needs distinct coordinates: no hash collisions among the features and their crosses
    named = named_rows([{k: 1.0 for r in rows for k in r}], model.hasher)
    _, indices, _ = expand(named, normalize_interactions(interactions), model.hasher.bits)
    assert len(set(indices.tolist())) == len(indices)
    base = model.learn(rows, y)
    for factor in (1e-5, 3.0, -250.0):
        scaled_rows = [{k: (v * factor if k == "a^1" else v) for k, v in r.items()} for r in rows]
        scaled = make_learner(algo, "logistic", interactions=interactions).learn(scaled_rows, y)
        scale = np.maximum(np.abs(base), np.median(np.abs(base)) + 1e-300)
        assert np.all(np.abs(scaled - base) <= 1e-9 * scale), (factor, np.max(np.abs(scaled - base) / scale))
    assert np.abs(base).max() > 0.1


def test_interactions_survive_save_and_load(tmp_path):
    rows = [{"a^x": 1.0, "b^y": 2.0}, {"a^x": -1.0, "b^z": 0.5}]
    model = make_learner("scinol2", "logistic", interactions=["ba", "abb"])
    model.learn(rows, [1, -1])
    assert model.header()["interactions"] == ["ab", "abb"]
    model.save(str(tmp_path / "m.scinol"))
    again = OnlineLearner.load(str(tmp_path / "m.scinol"))
    assert again.interactions == ("ab", "abb")
    assert np.array_equal(again.decision_function(rows), model.decision_function(rows))
    assert np.array_equal(again.learn(rows, [1, 1]), model.learn(rows, [1, 1]))


def test_a_header_without_interactions_loads_as_none():
    meta = make_learner("scinol2", "logistic").header()
    del meta["interactions"]
    assert OnlineLearner.from_header(meta).interactions == ()


def test_namespaced_rows_are_checked():
    with pytest.raises(ValueError, match="must agree"):
        make_learner("scinol2", "logistic").learn(
            NamespacedRows(np.array([0, 2]), np.array([1, 2]), np.array([1.0]), np.array([97, 97], dtype=np.uint8)),
            [1.0])
    with pytest.raises(ValueError, match="non-finite"):
        make_learner("scinol2", "logistic").learn(
            NamespacedRows(np.array([0, 1]), np.array([1]), np.array([np.inf]), np.array([97], dtype=np.uint8)),
            [1.0])
    # two entries of one index, each finite, sum past the largest double: the merged row is still checked
    with pytest.raises(ValueError, match="non-finite feature value inf at row 1, feature index 5"):
        make_learner("scinol2", "logistic").learn(
            NamespacedRows(np.array([0, 1, 4]), np.array([3, 9, 5, 5]), np.array([1.0, 1.0, 1e308, 1e308]),
                           np.full(4, 97, dtype=np.uint8)), [1.0, 0.0])
