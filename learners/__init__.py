"""scinol-stream learners: parameter-free, scale-invariant online linear models.

Pure NumPy state and compiled (numba) batch kernels; no Beam, no Kafka.
"""

__version__ = "0.1.0"

from .model import OnlineLearner, make_learner  # noqa: E402
from .registry import make_algorithm  # noqa: E402

__all__ = ["OnlineLearner", "make_learner", "make_algorithm", "__version__"]
