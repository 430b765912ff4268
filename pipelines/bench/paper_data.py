"""The paper's own data sets (Kempka et al. 2019, §4.2), read from a
directory given with ``--paper-data DIR`` (opt-in): one sub-folder per set,
holding the files as their sources publish them (``bank/bank-additional-full.csv.gz``,
``adult/adult.data`` and ``adult.test``, ``madelon/madelon_{train,valid}.{data,labels}``,
``mnist/``, ``shuttle/shuttle.{trn,tst}``).

They are read in place, never copied. As in the paper, categorical features
are one-hot encoded, a missing value ("?", "unknown") is a category of its
own, and sets without a test set are split 2/3 / 1/3 at random.
Covertype and the KDD Census-Income set are not on these machines (Adult
stands in for Census); a set whose files are missing is reported and skipped.
"""

from __future__ import annotations

import csv
import gzip
import os

import numpy as np

from pipelines.bench.datasets import Dataset, class_indices, random_split

# Fewer passes than the bundled sets: these are 2k–60k rows.
EPOCHS = {"bank": 3, "adult": 3, "madelon": 5, "mnist": 2, "shuttle": 3}


def one_hot(rows: list[list[str]], categorical: list[int]) -> np.ndarray:
    """Numeric columns as floats, each categorical column as 0/1 columns
    (one per value seen in ``rows``, in sorted order)."""
    columns = []
    for j in range(len(rows[0])):
        values = [r[j] for r in rows]
        if j in categorical:
            levels = sorted(set(values))
            index = {v: i for i, v in enumerate(levels)}
            block = np.zeros((len(rows), len(levels)))
            block[np.arange(len(rows)), [index[v] for v in values]] = 1.0
            columns.append(block)
        else:
            columns.append(np.array(values, dtype=np.float64)[:, None])
    return np.hstack(columns)


def load_bank(root: str) -> Dataset:
    """UCI Bank Marketing, bank-additional-full (the file the paper used)."""
    with gzip.open(os.path.join(root, "bank", "bank-additional-full.csv.gz"), "rt", newline="") as f:
        rows = list(csv.reader(f, delimiter=";"))
    header, rows = rows[0], [r for r in rows[1:] if r]
    label = header.index("y")
    features = [[v for j, v in enumerate(r) if j != label] for r in rows]
    numeric = {"age", "duration", "campaign", "pdays", "previous", "emp.var.rate", "cons.price.idx",
               "cons.conf.idx", "euribor3m", "nr.employed"}
    names = [h for j, h in enumerate(header) if j != label]
    X = one_hot(features, [j for j, h in enumerate(names) if h not in numeric])
    return random_split("bank", "paper data", X, [r[label] for r in rows], EPOCHS["bank"])


def load_adult(root: str) -> Dataset:
    """UCI Adult (a stand-in for the paper's KDD Census-Income), its own test set."""
    def read(name):
        with open(os.path.join(root, "adult", name)) as f:
            lines = [ln.strip() for ln in f if ln.strip() and not ln.startswith("|")]
        return [[v.strip() for v in ln.split(",")] for ln in lines]

    train, test = read("adult.data"), read("adult.test")
    rows = train + test
    X = one_hot([r[:-1] for r in rows], [1, 3, 5, 6, 7, 8, 9, 13])
    y = np.array([r[-1].rstrip(".") == ">50K" for r in rows], dtype=np.int64)
    n = len(train)
    return Dataset("adult", "paper data", X[:n], y[:n], X[n:], y[n:], 2, EPOCHS["adult"],
                   "adult.data / adult.test")


def load_madelon(root: str) -> Dataset:
    """Madelon: train on train, test on valid (the challenge's test labels were never released)."""
    def read(stem):
        X = np.loadtxt(os.path.join(root, "madelon", f"madelon_{stem}.data"))
        y = np.loadtxt(os.path.join(root, "madelon", f"madelon_{stem}.labels"))
        return X, (y > 0).astype(np.int64)

    (Xtr, ytr), (Xte, yte) = read("train"), read("valid")
    return Dataset("madelon", "paper data", Xtr, ytr, Xte, yte, 2, EPOCHS["madelon"], "train / valid")


def _idx(path: str) -> np.ndarray:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load_mnist(root: str) -> Dataset:
    """MNIST, raw pixels 0..255, 60,000 / 10,000."""
    d = os.path.join(root, "mnist")
    Xtr = _idx(os.path.join(d, "train-images-idx3-ubyte.gz")).reshape(60000, -1).astype(np.float64)
    Xte = _idx(os.path.join(d, "t10k-images-idx3-ubyte.gz")).reshape(10000, -1).astype(np.float64)
    ytr = _idx(os.path.join(d, "train-labels-idx1-ubyte")).astype(np.int64)
    yte = _idx(os.path.join(d, "t10k-labels-idx1-ubyte")).astype(np.int64)
    return Dataset("mnist", "paper data", Xtr, ytr, Xte, yte, 10, EPOCHS["mnist"], "train / t10k")


def load_shuttle(root: str) -> Dataset:
    """Statlog Shuttle, 7 classes, UCI's trn/tst split (the paper splits PMLB's join at random)."""
    tr = np.loadtxt(os.path.join(root, "shuttle", "shuttle.trn"))
    te = np.loadtxt(os.path.join(root, "shuttle", "shuttle.tst"))  # tab-separated: any whitespace
    y, k = class_indices(np.concatenate([tr[:, -1], te[:, -1]]))
    n = len(tr)
    return Dataset("shuttle", "paper data", tr[:, :-1], y[:n], te[:, :-1], y[n:], k, EPOCHS["shuttle"],
                   "shuttle.trn / shuttle.tst")


LOADERS = {"bank": load_bank, "adult": load_adult, "madelon": load_madelon, "mnist": load_mnist,
           "shuttle": load_shuttle}
NOT_HERE = ("covertype", "census (KDD)")
