"""Posterior predictive distributions: E_q[p(x | parents)] for every entry of a node
(docs/predict.md).

The distributions live here, below ``graph/``: the graph (``graph/predictive.py``:
``node.predictive()``) and the factors read them, they read only ``families/``.

Each conditional factor answers ``predictive(q, plates, ctx)`` (declared on
:class:`~blrgraph.graph.factors.base.Conditional`): ``q`` describes each parent as
a fixed value, a fitted q (family + natural parameters) or a derived quantity (a
linear predictor ``Dot(X, w)``); the factor returns a :class:`Predictive` with
``plates``. Conjugate factors integrate exactly (Student-t, multivariate t,
Beta-Binomial, negative binomial, Dirichlet-multinomial, Lomax, beta-prime); the
base class falls back on Monte Carlo over q (mean-field products, non-conjugate
links), with the mean and variance exact wherever the factor gives them.

A vector node observed with a per-coordinate mask gives each partly observed entry the
predictive of its missing coordinates given its observed ones (:class:`PartlyObserved`,
docs/math.md §6.1).
"""
from .base import Predictive, missing_patterns
from .family import FamilyPredictive, MixturePredictive, MonteCarloPredictive
from .multivariate import MultivariateT
from .parents import (Context, ParentDist, dot_parent, fixed_predictive, monte_carlo,
                      predictive_family, slot_stats)
from .partial import PartlyObserved
from .scalar import (BetaBinomial, CategoricalPredictive, DirichletMultinomial, ScipyScalar,
                     beta_binomial, beta_prime, lomax, negative_binomial, normal, student_t)

__all__ = ["BetaBinomial", "CategoricalPredictive", "Context", "DirichletMultinomial",
           "FamilyPredictive", "MixturePredictive", "MonteCarloPredictive", "MultivariateT",
           "ParentDist", "PartlyObserved", "Predictive", "ScipyScalar", "beta_binomial",
           "beta_prime", "dot_parent", "fixed_predictive", "lomax", "missing_patterns",
           "monte_carlo", "negative_binomial", "normal", "predictive_family", "slot_stats",
           "student_t"]
