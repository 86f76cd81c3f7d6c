"""The factor graph: nodes, factors and their messages, plates, the Model."""
from .chains_gaussian import GaussianMarkovChain
from .deterministic import Add, Dot, Gate, Gather
from .model import FactorGraph
from .node import Constant, Posterior, Stochastic
from .potential import Potential
from .stick_breaking import StickBreaking
from .categorical_chain import CategoricalMarkovChain
from .nodes import (Bernoulli, Beta, Binomial, Categorical, Dirichlet, Exponential, Gamma, Mixture,
                    Multinomial, MultivariateNormal, Normal, NormalGamma, NormalWishart, Poisson,
                    Wishart)
