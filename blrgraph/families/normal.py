"""Univariate Normal (Gaussian) family, parameterised by mean and precision.

    N(x | m, s^{-1}) = sqrt(s / 2pi) exp(-s (x - m)^2 / 2),   s = 1/v > 0

Exponential-family form (docs/math.md §2.1): T(x) = (x, x^2), lam = (m s, -s/2), h = 1,

    A(lam) = -lam1^2 / (4 lam2) - 1/2 log(-2 lam2) + 1/2 log 2pi
           = m^2 s / 2 - 1/2 log s + 1/2 log 2pi,
    mu = (m, m^2 + 1/s),   H = 1/2 log(2 pi e / s),
    KL(N1 || N2) = 1/2 [log(s1/s2) + s2 (1/s1 + (m1 - m2)^2) - 1].

Reference: Bishop, *Pattern Recognition and Machine Learning* (2006), §2.3 and
§2.4; Wainwright & Jordan (2008), Example 3.3.
"""
from __future__ import annotations

import numpy as np
from scipy import stats

from .base import ExponentialFamily
from ._scalar_helpers import (as_nat, broadcast_copies, check_finite, check_positive, draw_shape,
                              frozen, get_rng)

_LOG_2PI = np.log(2.0 * np.pi)


class Normal(ExponentialFamily):
    """Normal(mean, precision); precision s = 1/variance > 0."""

    name = "Normal"
    locational = True
    param_names = ("mean", "precision")
    event_ndims = (0, 0)
    value_ndim = 0

    def check_support(self, x, components=False, categories=None):
        x = np.asarray(x, dtype=float)
        return np.zeros(x.shape, bool), "real values"

    def placeholder(self, event_shape):
        return np.zeros(event_shape)

    # ---- parameterisations -------------------------------------------------
    def validate_params(self, mean, precision, where=None):
        m = check_finite(self.name, "mean", mean, where)
        s = check_positive(self.name, "precision", precision, where)
        return m, s

    def natural_from_params(self, mean, precision):
        m, s = broadcast_copies(self._minus_c(mean), precision)
        return (m * s, -0.5 * s)

    def params_from_natural(self, nat):
        m, s = self._ms(nat)
        m, s = broadcast_copies(self._plus_c(m), s)
        return {"mean": m, "precision": s}

    def _ms(self, nat):
        l1, l2 = as_nat(nat, 2)
        s = -2.0 * l2
        return l1 / s, s

    def centre(self, x):
        return self._minus_c(x)

    # ---- exponential-family functions (of the centred variable) -----------
    def suff_stats(self, x):
        x = np.asarray(x, dtype=float)
        return (x, x * x)

    def log_partition(self, nat):
        l1, l2 = as_nat(nat, 2)
        return -l1 * l1 / (4.0 * l2) - 0.5 * np.log(-2.0 * l2) + 0.5 * _LOG_2PI

    def mean_params(self, nat):
        m, s = self._ms(nat)
        m, s = np.broadcast_arrays(m, s)
        return (np.array(m), m * m + 1.0 / s)

    def entropy(self, nat):
        m, s = self._ms(nat)
        return np.broadcast_to(0.5 * (_LOG_2PI + 1.0 - np.log(s)), np.broadcast_shapes(m.shape, s.shape)).copy()

    def kl(self, nat1, nat2):
        m1, s1 = self._ms(nat1)
        m2, s2 = self._ms(nat2)
        d = m1 - m2
        return 0.5 * (np.log(s1 / s2) + s2 * (1.0 / s1 + d * d) - 1.0)

    def kl_rounding(self, nat1, nat2, unit):
        """How far rounding alone can move :meth:`kl`: ``unit`` x the magnitude of its terms,
        plus the KL the rounding of the means alone gives, (unit^2 / 2) (s1 m1^2 + s2 m2^2)
        (see MultivariateNormal.kl_rounding)."""
        m1, s1 = self._ms(nat1)
        m2, s2 = self._ms(nat2)
        d = m1 - m2
        terms = np.abs(np.log(s1 / s2)) + s2 / s1 + s2 * d * d + 1.0
        r1, r2 = m1 * np.sqrt(s1), m2 * np.sqrt(s2)     # the means' sizes in sds
        return unit * terms + 0.5 * unit * unit * (r1 * r1 + r2 * r2)

    def logpdf(self, x, nat):
        m, s = self._ms(nat)
        d = self.centre(np.asarray(x, dtype=float)) - m
        return 0.5 * (np.log(s) - _LOG_2PI) - 0.5 * s * d * d

    def sample(self, nat, rng=None, size=None):
        m, s = self._ms(nat)
        shape = draw_shape(size, np.broadcast_shapes(m.shape, s.shape))
        return self._plus_c(m + get_rng(rng).standard_normal(shape) / np.sqrt(s))

    def centred_point_value(self, nat):
        m, s = self._ms(nat)
        return np.broadcast_to(m, np.broadcast_shapes(m.shape, s.shape)).copy()

    def mean(self, nat):
        return np.array(self._plus_c(self.centred_point_value(nat)))

    def var(self, nat):
        m, s = self._ms(nat)
        return np.broadcast_to(1.0 / s, np.broadcast_shapes(m.shape, s.shape)).copy()

    def mode(self, nat):
        return self.mean(nat)

    def precision_is_pd(self, nat):
        return bool(np.all(-2.0 * np.asarray(nat[1]) > 0))

    def to_scipy(self, nat):
        m, s = self._ms(nat)
        m, s = np.broadcast_arrays(self._plus_c(m), s)
        sd = 1.0 / np.sqrt(s)
        return frozen(m.shape, lambda i: stats.norm(loc=m[i], scale=sd[i]))
