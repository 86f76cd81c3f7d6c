"""The public node classes (docs/api.md): each picks its family and its factor.

Every constructor argument may be a number, an array or a conjugate parent
node; ``plates=`` replicates the node (numpy broadcasting), ``name=`` names it.
"""
from __future__ import annotations

import inspect

import numpy as np

from ..families.bernoulli import Bernoulli as BernoulliFamily
from ..families.beta import Beta as BetaFamily
from ..families.binomial import Binomial as BinomialFamily
from ..families.categorical import Categorical as CategoricalFamily
from ..families.dirichlet import Dirichlet as DirichletFamily
from ..families.exponential import Exponential as ExponentialFamily
from ..families.gamma import Gamma as GammaFamily
from ..families.multinomial import Multinomial as MultinomialFamily
from ..families.multivariate_normal import MultivariateNormal as MVNFamily
from ..families.normal import Normal as NormalFamily
from ..families.normal_gamma import NormalGamma as NormalGammaFamily
from ..families.normal_wishart import NormalWishart as NormalWishartFamily
from ..families.poisson import Poisson as PoissonFamily
from ..families.wishart import Wishart as WishartFamily
from .factors.base import Slot
from .factors.binary import BernoulliFactor, BinomialFactor
from .factors.categorical import CategoricalFactor, MultinomialFactor
from .factors.fixed import FixedPrior
from .factors.gaussian import (DiagonalGammaFactor, MultivariateNormalFactor, NormalFactor, NormalGammaFactor,
                               NormalWishartFactor)
from .factors.mixture import MixtureFactor
from .factors.positive import ExponentialFactor, GammaFactor, PoissonFactor
from .inputs import check_trials, real_numbers
from .node import Node, Stochastic


def _is_node(x, family=None):
    return isinstance(x, Node) and (family is None or isinstance(x.provides, family))


def _positive_fixed(cls, name, value, what):
    if not isinstance(value, Node) and not real_numbers(value):
        raise TypeError(f"{cls} '{name}': {what} must be a number or an array of numbers, got "
                        f"{str(value)[:60]!r}")
    v = np.asarray(value, dtype=float) if not isinstance(value, Node) else None
    if v is None:
        raise TypeError(f"{cls} '{name}': {what} must be a number or an array (a random {what} "
                        f"has no conjugate update; fix it or use a point estimate with fit('em'))")
    if not np.all(np.isfinite(v)) or np.any(v <= 0):
        raise ValueError(f"{cls} '{name}': {what} must be finite and > 0, got {value!r}")
    return v


def _bind_spec(cls, where, args, kw):
    """Check ``args`` / ``kw`` against ``cls._spec``'s parameters first, so that a missing
    or unknown argument is refused naming the node and its parameters (not as a
    TypeError of an internal function)."""
    sig = inspect.signature(cls._spec)
    P = inspect.Parameter
    if any(p.kind is P.VAR_POSITIONAL for p in sig.parameters.values()):
        return
    # the parameters before ``name`` may be positional; those after it are keywords only
    # (``name`` itself is a keyword of the constructor: ``Poisson(1.0, "x")`` does not name it)
    names = list(sig.parameters)
    cut = names.index("name") if "name" in names else len(names)
    positional = [n for n in names[:cut]
                  if sig.parameters[n].kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    shown = ", ".join(positional + [f"{n}=" for n in names[cut + 1:]] + ["plates=", "name="])
    shown = f"; its parameters are {cls.__name__}({shown})"
    if len(args) > len(positional):
        extra = args[len(positional):]
        hint = ""
        if any(isinstance(a, str) for a in extra):
            s = next(a for a in extra if isinstance(a, str))
            hint = f"; a node's name is a keyword: name={s[:40]!r}"
        raise TypeError(f"{where}: takes at most {len(positional)} parameter"
                        f"{'s' if len(positional) != 1 else ''} ({', '.join(positional)}) before "
                        f"the keywords, got {len(args)}{hint}{shown}")
    try:
        sig.bind(*args, **kw)
    except TypeError as e:
        raise TypeError(f"{where}: {e}{shown}") from None


def _who(cls_name, name):
    return f"{cls_name} '{name}'" if name is not None else cls_name


class _Public(Stochastic):
    """Shared constructor: ``_spec`` returns (family, factor class, parents, slots, fixed)."""

    def __init__(self, *args, plates=None, name=None, **kw):
        _bind_spec(type(self), _who(type(self).__name__, name), args, dict(kw, name=name))
        family, factor, parents, slots, fixed = self._spec(*args, name=name, **kw)
        super().__init__(family, factor, parents, slots, plates=plates, name=name, **fixed)


class Normal(_Public):
    """Normal(mean, precision): scalar Gaussian; or Normal(theta) with one NormalGamma parent."""

    @classmethod
    def _spec(cls, mean, precision=None, name=None):
        if precision is None:
            if not _is_node(mean, NormalGammaFamily):
                raise TypeError(f"Normal '{name}': give Normal(mean, precision), or Normal(theta) with "
                                f"theta a NormalGamma node")
            return NormalFamily(), NormalGammaFactor, [mean], [Slot("theta", NormalGammaFamily())], {}
        return (NormalFamily(), NormalFactor, [mean, precision],
                [Slot("mean", NormalFamily()), Slot("precision", GammaFamily(), kind="positive")], {})


class MultivariateNormal(_Public):
    """MultivariateNormal(mean, precision): vector Gaussian (precision = inverse covariance);
    or MultivariateNormal(theta) with one NormalWishart parent."""

    @classmethod
    def _spec(cls, mean, precision=None, name=None):
        if precision is None:
            if not _is_node(mean, NormalWishartFamily):
                raise TypeError(f"MultivariateNormal '{name}': give MultivariateNormal(mean, precision), "
                                f"or MultivariateNormal(theta) with theta a NormalWishart node")
            return MVNFamily(), NormalWishartFactor, [mean], [Slot("theta", NormalWishartFamily())], {}
        if not _is_node(mean) and np.ndim(mean) < 1:
            raise ValueError(f"MultivariateNormal '{name}': mean must be a vector (shape (..., D)), "
                             f"got {mean!r}")
        if _is_node(precision, GammaFamily):
            return (MVNFamily(), DiagonalGammaFactor, [mean, precision],
                    [Slot("mean", MVNFamily()), Slot("precision", GammaFamily())], {})
        return (MVNFamily(), MultivariateNormalFactor, [mean, precision],
                [Slot("mean", MVNFamily()), Slot("precision", WishartFamily(), kind="spd")], {})


class Gamma(_Public):
    """Gamma(shape, rate): shape a (number, or a Gamma node: non-conjugate, fit("ncvmp")),
    rate b (number or Gamma node); mean a/b."""

    @classmethod
    def _spec(cls, shape, rate, name=None):
        if _is_node(shape):
            from .factors.hyper import GammaShapeFactor
            if not isinstance(shape.provides, GammaFamily):
                raise TypeError(f"Gamma '{name}': a random shape must be a Gamma node (a positive "
                                f"quantity), got {shape.label()}")
            return (GammaFamily(), GammaShapeFactor, [shape, rate],
                    [Slot("shape", GammaFamily()), Slot("rate", GammaFamily(), kind="positive")], {})
        a = _positive_fixed("Gamma", name, shape, "shape")
        return (GammaFamily(), GammaFactor, [rate], [Slot("rate", GammaFamily(), kind="positive")],
                {"shape": a})


class Exponential(_Public):
    """Exponential(rate): rate a number or a Gamma node."""

    @classmethod
    def _spec(cls, rate, name=None):
        return (ExponentialFamily(), ExponentialFactor, [rate],
                [Slot("rate", GammaFamily(), kind="positive")], {})


class Poisson(_Public):
    """Poisson(rate): rate a number or a Gamma node. (``log_rate=`` is non-conjugate.)"""

    @classmethod
    def _spec(cls, rate=None, name=None, log_rate=None):
        if log_rate is not None:
            from .factors.nonconjugate import poisson_log_link_spec
            return poisson_log_link_spec(log_rate, name)
        if rate is None:
            raise TypeError(f"Poisson '{name}': give rate or log_rate=")
        return (PoissonFamily(), PoissonFactor, [rate], [Slot("rate", GammaFamily(), kind="positive")], {})


class Bernoulli(_Public):
    """Bernoulli(p): p a probability or a Beta node. (``logits=`` is non-conjugate.)"""

    @classmethod
    def _spec(cls, p=None, name=None, logits=None):
        if logits is not None:
            from .factors.nonconjugate import bernoulli_logit_spec
            return bernoulli_logit_spec(logits, name)
        if p is None:
            raise TypeError(f"Bernoulli '{name}': give p or logits=")
        return (BernoulliFamily(), BernoulliFactor, [p], [Slot("p", BetaFamily(), kind="unit")], {})


class Binomial(_Public):
    """Binomial(n, p): n trials (fixed), p a probability or a Beta node."""

    @classmethod
    def _spec(cls, n, p, name=None):
        check_trials("Binomial", name, n)
        n = np.asarray(n)
        if isinstance(n, Node) or np.any(n < 0) or np.any(n != np.round(n)):
            raise ValueError(f"Binomial '{name}': n must be non-negative integers, got {n!r}")
        return (BinomialFamily(n), BinomialFactor, [p], [Slot("p", BetaFamily(), kind="unit")],
                {"n": n})


class Categorical(_Public):
    """Categorical(p): values 0..K-1; p a probability vector or a Dirichlet node."""

    @classmethod
    def _spec(cls, p=None, name=None, logits=None):
        if logits is not None:
            from .factors.nonconjugate import categorical_logit_spec
            return categorical_logit_spec(logits, name)
        return (CategoricalFamily(), CategoricalFactor, [p],
                [Slot("p", DirichletFamily(), kind="simplex")], {})


class Multinomial(_Public):
    """Multinomial(n, p): count vectors summing to n; p a probability vector or a Dirichlet node."""

    @classmethod
    def _spec(cls, n, p, name=None):
        check_trials("Multinomial", name, n)
        n = np.asarray(n)
        if np.any(n < 0) or np.any(n != np.round(n)):
            raise ValueError(f"Multinomial '{name}': n must be non-negative integers, got {n!r}")
        return (MultinomialFamily(n), MultinomialFactor, [p],
                [Slot("p", DirichletFamily(), kind="simplex")], {"n": n})


def _fixed(family):
    def spec(cls, *params, name=None):
        names = list(family.param_names)
        if len(params) != len(names):
            raise TypeError(f"{_who(cls.__name__, name)}: give its {len(names)} parameters "
                            f"{cls.__name__}({', '.join(names)}), got {len(params)}")
        for p, pname in zip(params, names):
            if isinstance(p, Node):
                raise TypeError(f"{cls.__name__} '{name}': its parameters must be numbers or arrays "
                                f"(got the node {p.label()}); no conjugate update exists for them")
            if not real_numbers(p):
                raise TypeError(f"{_who(cls.__name__, name)}: parameter '{pname}' must be a number "
                                f"or an array of numbers, got {str(p)[:60]!r}")
        return family, FixedPrior, list(params), [], {}
    return classmethod(spec)


class Beta(_Public):
    """Beta(a, b) with fixed a, b > 0."""
    _spec = _fixed(BetaFamily())


class Dirichlet(_Public):
    """Dirichlet(alpha) with fixed concentrations alpha > 0 (last axis = categories); or
    Dirichlet(alpha) with alpha a Gamma node whose last plate axis holds the K random
    concentrations (BayesPy's Concentration); or Dirichlet(base, concentration=s):
    concentrations s * base with s a Gamma node and base a fixed positive vector. Both
    random forms are non-conjugate: fit("ncvmp")."""

    @classmethod
    def _spec(cls, alpha, name=None, concentration=None):
        if concentration is None and isinstance(alpha, Node):
            return cls._alpha_spec(alpha, name)
        if concentration is None:
            return _fixed(DirichletFamily()).__func__(cls, alpha, name=name)
        from .factors.hyper import DirichletConcentrationFactor
        if isinstance(alpha, Node):
            raise TypeError(f"Dirichlet '{name}': with concentration=, the first argument is the "
                            f"fixed base vector (e.g. np.ones(K)), not the node {alpha.label()}")
        (base,) = DirichletFamily().validate_params(alpha, where=name)
        if not _is_node(concentration, GammaFamily):
            raise TypeError(f"Dirichlet '{name}': concentration= must be a Gamma node (the "
                            f"random scale of the concentrations), got {concentration!r}")
        return (DirichletFamily(), DirichletConcentrationFactor, [concentration],
                [Slot("concentration", GammaFamily())], {"base": base})

    @classmethod
    def _alpha_spec(cls, alpha, name):
        from .factors.hyper import DirichletAlphaFactor
        if not _is_node(alpha, GammaFamily):
            raise TypeError(f"Dirichlet '{name}': random concentrations must be a Gamma node "
                            f"(K positive values on its last plate axis, e.g. "
                            f"bg.Gamma(1.0, 0.1, plates=(K,))), got {alpha.label()}")
        if len(alpha.plates) < 1 or alpha.plates[-1] < 2:
            raise ValueError(f"Dirichlet '{name}': the concentrations {alpha.label()} have plates "
                             f"{tuple(alpha.plates)}; give the Gamma node its K >= 2 categories "
                             f"as the last plate axis (plates=(K,)), or use "
                             f"Dirichlet(np.ones(K), concentration=s) for one random scale")
        return (DirichletFamily(), DirichletAlphaFactor, [alpha], [Slot("alpha", GammaFamily())], {})


class Wishart(_Public):
    """Wishart(dof, scale): E[Lambda] = dof * scale (scipy's convention); or
    Wishart(dof, rate=B) with the inverse scale B = scale^-1 a Wishart node (a conjugate
    hyperprior, E[Lambda] = dof * E-inverse of B) or an SPD array."""

    @classmethod
    def _spec(cls, dof, scale=None, name=None, rate=None):
        if (scale is None) == (rate is None):
            raise TypeError(f"Wishart '{name}': give Wishart(dof, scale) or Wishart(dof, rate=B) "
                            f"(B the inverse scale), one of the two")
        if rate is None:
            if isinstance(scale, Node):
                raise TypeError(f"Wishart '{name}': a random scale has no conjugate update; give "
                                f"the inverse scale as a Wishart node: Wishart(dof, rate=B)")
            return _fixed(WishartFamily()).__func__(cls, dof, scale, name=name)
        from .factors.hyper import WishartRateFactor
        n = _positive_fixed("Wishart", name, dof, "dof")
        d = np.shape(rate.moments()[0] if isinstance(rate, Node) else rate)[-1]
        if np.any(n <= d - 1):
            raise ValueError(f"Wishart '{name}': dof must be > D - 1 = {d - 1}, got {dof!r}")
        return (WishartFamily(), WishartRateFactor, [rate],
                [Slot("rate", WishartFamily(), kind="spd")], {"dof": n})


class NormalGamma(_Public):
    """NormalGamma(mean, beta, shape, rate): mu | tau ~ N(mean, 1/(beta tau)), tau ~ Gamma(shape, rate)."""
    _spec = _fixed(NormalGammaFamily())


class NormalWishart(_Public):
    """NormalWishart(mean, beta, dof, scale): mu | L ~ N(mean, inv(beta L)), L ~ Wishart(dof, scale)."""
    _spec = _fixed(NormalWishartFamily())


class Mixture(Stochastic):
    """Mixture(z, Family, *component_params): x | z=k ~ Family(component k's parameters).

    The K components are the last plate axis of the component parameters; z is a
    Categorical node with K categories."""

    defer_prior = True  # see Stochastic.defer_prior

    def __init__(self, z, family_cls, *component_params, plates=None, name=None, **kw):
        if not (isinstance(family_cls, type) and issubclass(family_cls, _Public)):
            raise TypeError(f"Mixture '{name}': the second argument must be a node class such as "
                            f"bg.MultivariateNormal, got {family_cls!r}")
        _bind_spec(family_cls, f"{_who('Mixture', name)} of {family_cls.__name__} components",
                   component_params, dict(kw, name=name))
        family, factor, parents, slots, fixed = family_cls._spec(*component_params, name=name, **kw)
        if factor is FixedPrior:
            raise TypeError(f"Mixture '{name}': components of {family_cls.__name__} would have only "
                            f"fixed parameters; give them parent nodes")
        super().__init__(family, MixtureFactor, [z] + list(parents),
                         [Slot("z", CategoricalFamily())] + list(slots), plates=plates, name=name,
                         component=factor, component_slots=slots, **fixed)
