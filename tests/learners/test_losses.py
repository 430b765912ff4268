"""The compiled losses keep their small terms next to huge scores."""

import math

import numpy as np
import pytest

from learners.losses import SOFTMAX, loss_grad_into


@pytest.mark.parametrize("scale", [1.0, 1e149, -1e149, 1e300])
def test_softmax_loss_of_a_tie_is_ln_2_at_any_score_size(scale):
    # Two classes tied at the top: ℓ = ln 2 whatever the scores' size; with
    # ln Σ e^{ŷ-top} + top - ŷ_c the top cancels after ln 2 was rounded away.
    yhat = np.array([scale, scale, scale - 1e3 * abs(scale)])
    g = np.empty(3)
    assert loss_grad_into(SOFTMAX, 0.0, 1.0, yhat, g) == pytest.approx(math.log(2.0), rel=1e-15)
    np.testing.assert_allclose(g, [0.5, -0.5, 0.0], atol=1e-15)
