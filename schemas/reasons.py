"""The reasons a message becomes a dead letter: the ``reason`` field of a
``scinol.DeadLetter`` record, as module constants.

Raised as :class:`~schemas.codec.DecodeError` by :meth:`~schemas.codec.Codec.decode`:

- ``undecodable``        no or short header, wrong magic byte, Avro parse
                         failure, bytes left over after the record, or a
                         writer schema the reader schema cannot resolve
- ``unknown_schema_id``  the id is in neither the id map nor the registry
                         (or names a record this codec does not read)
- ``wrong_record_type``  the id belongs to another record than ``expected``

Found by the event checks of the pipelines (``pipelines.records.validation``):

- ``non_finite_feature`` a NaN or infinite feature value
- ``length_mismatch``    sparse indices and values of different lengths
- ``negative_index``     a negative sparse index
- ``duplicate_index``    a sparse index given twice
- ``oversized``          more than ``max_features`` entries (default 10**6)
- ``index_out_of_range`` a sparse index >= ``max_index``, or more than
                         ``max_index`` dense values (default 2**40; the
                         pipeline's is 2**22, ``scinol run --max-index``):
                         the learner would allocate state for every
                         coordinate below it
- ``too_many_models``    a model name beyond the ``--max-models`` a worker
                         accepts (each model holds a learner in memory)
- ``bad_label``          a label outside the loss's domain
                         (``learners.losses.prepare_labels``); a null or NaN
                         label means unlabelled and is fine
- ``non_finite_weight``  a NaN or infinite weight

Found for ``scinol.Label`` records on a labels topic (delayed feedback):

- ``label_unknown_event`` no event with that id arrived within the label TTL
                         (the label waited for it that long)
- ``label_expired``      the event was held longer than the label TTL (or
                         pushed out by the maximum) before its label came
- ``label_duplicate``    the event has already been learned from, or an
                         earlier label of that id found no event

A label record is also checked like an event's label and weight
(``bad_label``, ``non_finite_weight``, ``bad_weight``). Besides these, a
message over the pipeline's size limit is ``oversized`` before it is
decoded at all.
"""

UNDECODABLE = "undecodable"
UNKNOWN_SCHEMA_ID = "unknown_schema_id"
WRONG_RECORD_TYPE = "wrong_record_type"
DECODE_REASONS = (UNDECODABLE, UNKNOWN_SCHEMA_ID, WRONG_RECORD_TYPE)

NON_FINITE_FEATURE = "non_finite_feature"
LENGTH_MISMATCH = "length_mismatch"
NEGATIVE_INDEX = "negative_index"
DUPLICATE_INDEX = "duplicate_index"
BAD_LABEL = "bad_label"
NON_FINITE_WEIGHT = "non_finite_weight"
BAD_WEIGHT = "bad_weight"
OVERSIZED = "oversized"
INDEX_OUT_OF_RANGE = "index_out_of_range"
TOO_MANY_MODELS = "too_many_models"
EVENT_REASONS = (
    NON_FINITE_FEATURE,
    LENGTH_MISMATCH,
    NEGATIVE_INDEX,
    DUPLICATE_INDEX,
    BAD_LABEL,
    NON_FINITE_WEIGHT,
    BAD_WEIGHT,
    OVERSIZED,
    INDEX_OUT_OF_RANGE,
    TOO_MANY_MODELS,
)
LABEL_UNKNOWN_EVENT = "label_unknown_event"
LABEL_EXPIRED = "label_expired"
LABEL_DUPLICATE = "label_duplicate"
LABEL_REASONS = (LABEL_UNKNOWN_EVENT, LABEL_EXPIRED, LABEL_DUPLICATE)
REASONS = DECODE_REASONS + EVENT_REASONS + LABEL_REASONS
