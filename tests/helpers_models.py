"""Small blrgraph models shared by tests that check one fit against another."""
from __future__ import annotations

import numpy as np

import blrgraph as bg


def gmm_model(X, K=3):
    """A GMM with a joint NormalWishart prior per component (Dirichlet(0.5) weights)."""
    N, D = X.shape
    pi = bg.Dirichlet(np.full(K, 0.5), name="pi")
    z = bg.Categorical(pi, plates=(N,), name="z")
    theta = bg.NormalWishart(np.zeros(D), 0.01, D + 1.0, np.eye(D), plates=(K,), name="theta")
    return bg.Model(bg.Mixture(z, bg.MultivariateNormal, theta, name="x").observe(X))


def lda_model(n_docs, doc, words, counts, K=3, V=30):
    """LDA on (document, word, count) triplets: theta per document gathered by ``doc``,
    topics phi ~ Dirichlet(1/K), words weighted by their counts."""
    theta = bg.Dirichlet(np.full(K, 1 / K), plates=(n_docs,), name="theta")
    phi = bg.Dirichlet(np.full(V, 1 / K), plates=(K,), name="phi")
    z = bg.Categorical(theta[doc], plates=(len(doc),), name="z")
    y = bg.Mixture(z, bg.Categorical, phi, name="words").observe(words, weights=counts)
    return bg.Model(y)
