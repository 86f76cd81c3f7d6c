"""blrgraph: factor-graph inference with one update, the Bayesian learning rule.

    lam <- (1 - rho) lam + rho (lam0 + sum of natural-gradient messages)

Conjugate Bayes, VMP, SVI, non-conjugate VMP and EM are that update with
different settings (``Model(...).fit(method)``).
"""
from . import closed_form, families
from .graph import GaussianMarkovChain
from .graph import (Add, Bernoulli, Beta, Binomial, Categorical, CategoricalMarkovChain, Dirichlet,
                    Dot, Exponential, Gamma, Gate, Mixture, Multinomial, MultivariateNormal, Normal,
                    NormalGamma, NormalWishart, Poisson, Potential, StickBreaking, Wishart)
from .graph.predictive import log_predictive
from .inference import METHODS, FitResult, Method, elbo
from .model import Model

__version__ = "0.1.0"

__all__ = ["Add", "Bernoulli", "Beta", "Binomial", "Categorical", "CategoricalMarkovChain",
           "Dirichlet", "Dot", "Exponential", "Gamma", "GaussianMarkovChain", "Gate", "Mixture",
           "Model", "Multinomial", "MultivariateNormal", "Normal", "NormalGamma", "NormalWishart",
           "Poisson", "Potential", "StickBreaking", "Wishart", "FitResult", "METHODS", "Method", "elbo",
           "closed_form", "families", "log_predictive"]
