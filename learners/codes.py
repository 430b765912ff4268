"""The integer code of every coordinate-separable algorithm: the one
definition, used by the specs (:mod:`learners.algorithms`), the compiled
driver (:mod:`learners.kernels`) and the per-family math modules. Numba
treats these module globals as compile-time constants."""

SCINOL1, SCINOL2 = 1, 2
OGD_COORD, OGD_GLOBAL = 10, 11
KT_ALG1, KT_AVG, KT_COORD = 20, 21, 22
KOTLOWSKI1 = 30
IMPLICIT, PA0, PA1, PA2, APROX = 40, 41, 42, 43, 44
SGD, ADAGRAD, ADAM, NAG = 50, 51, 52, 53
