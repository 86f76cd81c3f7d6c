"""scikit-learn estimators over the zoo models (docs/sklearn.md; extra ``blrgraph[sklearn]``).

Each estimator stores its parameters in ``__init__`` (scikit-learn's convention), and
``fit`` builds the node graph of the matching zoo model (``blrgraph.zoo.*``) and fits
it: no second engine. ``score`` is the mean held-out log predictive density per
sample, so ``GridSearchCV`` chooses a number of components by predictive density.

    BayesianGaussianMixture     zoo gmm (full / diag), Dirichlet or stick-breaking weights
    BayesianRidge, ARDRegression  zoo linreg, hyper="evidence" (scikit-learn's models)
    BayesianLogisticRegression  zoo logreg
    LatentDirichletAllocation   zoo lda
    GaussianHMM                 zoo hmm
    ProbabilisticPCA            zoo pca
"""
from .decomposition import LatentDirichletAllocation, ProbabilisticPCA
from .hmm import GaussianHMM
from .linear import ARDRegression, BayesianLogisticRegression, BayesianRidge
from .mixture import BayesianGaussianMixture

__all__ = ["ARDRegression", "BayesianGaussianMixture", "BayesianLogisticRegression",
           "BayesianRidge", "GaussianHMM", "LatentDirichletAllocation", "ProbabilisticPCA"]
