"""Exponential-family math: T(x), natural <-> mean parameters, log partition,
entropy, KL, sampling, scipy conversion. No graph, no inference."""
from .base import ExponentialFamily
from .bernoulli import Bernoulli
from .beta import Beta
from .binomial import Binomial
from .categorical import Categorical
from .dirichlet import Dirichlet
from .exponential import Exponential
from .gamma import Gamma
from .multinomial import Multinomial
from .multivariate_normal import MultivariateNormal
from .normal import Normal
from .normal_gamma import NormalGamma
from .normal_wishart import NormalWishart
from .poisson import Poisson
from .wishart import Wishart

FAMILIES = {cls.__name__: cls for cls in (
    Bernoulli, Beta, Binomial, Categorical, Dirichlet, Exponential, Gamma, Multinomial,
    MultivariateNormal, Normal, NormalGamma, NormalWishart, Poisson, Wishart)}

__all__ = ["ExponentialFamily", "FAMILIES"] + sorted(FAMILIES)
