"""A learner's input gathered from decoded columns without a Python object
per event: CSR rows gathered in one compiled call (:func:`gather_rows`), or
namespaced rows read again from the messages' bytes (:func:`features_of`).
"""

from __future__ import annotations

import numpy as np

from learners.interactions import DEFAULT_NAMESPACE, NamespacedRows
from learners.jit import njit
from pipelines.records.avro.feature_reader import read_namespaced


@njit(cache=True)
def gather_rows(indptr, indices, values, rows):
    """The CSR rows ``rows`` of (indptr, indices, values), in that order."""
    n = rows.shape[0]
    out_ptr = np.zeros(n + 1, np.int64)
    for k in range(n):
        out_ptr[k + 1] = out_ptr[k] + indptr[rows[k] + 1] - indptr[rows[k]]
    out_i = np.empty(out_ptr[n], np.int64)
    out_v = np.empty(out_ptr[n], np.float64)
    for k in range(n):
        lo, hi = indptr[rows[k]], indptr[rows[k] + 1]
        out_i[out_ptr[k]:out_ptr[k + 1]] = indices[lo:hi]
        out_v[out_ptr[k]:out_ptr[k + 1]] = values[lo:hi]
    return out_ptr, out_i, out_v


def features_of(cols, rows: np.ndarray, learner):
    """The learner's input for ``rows`` of the columns ``cols`` (an
    :class:`pipelines.records.event_columns.EventColumns`, not imported:
    that module imports this one), without a Python
    object per event: CSR rows gathered from the decoded arrays; for a
    learner that crosses namespaces, namespaced rows read again from the
    messages' bytes in one compiled call (the decoded rows have colliding
    names summed already, the crosses need them apart). None when the
    per-event path must decide: another hasher, or crosses over a row the
    compiled reader did not take (its record has the names)."""
    hasher = learner.hasher
    if not learner.interactions:
        if cols.hashing != (hasher.bits, hasher.seed):
            return None
        return gather_rows(cols.indptr, cols.indices, cols.values, rows)
    if cols.feature_start is None or (cols.records and np.isin(rows, list(cols.records)).any()):
        return None
    indptr, indices, values, spaces = read_namespaced(cols.buf, cols.feature_start[rows], cols.msg_end[rows],
                                                      hasher.bits, hasher.seed, DEFAULT_NAMESPACE)
    return None if indptr.size == 0 else NamespacedRows(indptr, indices, values, spaces)
