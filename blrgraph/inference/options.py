"""``fit()``'s options: each checked where it enters, before anything changes."""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields

#: options of every method, of the stochastic methods only, of the batch methods only
COMMON = ("max_iter", "tol", "seed", "callback", "progress", "point", "rho", "init", "restarts",
          "local_iters", "local_tol")
STOCHASTIC = ("batch_size", "epochs", "max_steps", "tau", "kappa", "batch_over", "resume",
              "warmup", "final_local_pass")
BATCH = ("local_restart", "n_jobs", "rotate")
#: the optimizer methods' settings (adam, ogn, vogn, ivon, mog; checked by optimizers.check_hyper)
OPTIMIZER = ("beta1", "beta2", "eps", "hess_init", "ess", "mc_samples", "components")


@dataclass
class FitOptions:
    max_iter: int = None
    tol: float = 1e-8
    seed: int = None
    callback: object = None
    progress: bool = False
    point: object = None
    rho: float = None
    init: object = None
    restarts: int = 1
    local_iters: int = None
    local_tol: float = None
    local_restart: bool = None
    n_jobs: int = None
    rotate: bool = True
    batch_size: int = None
    epochs: int = None
    max_steps: int = None
    tau: float = None
    kappa: float = None
    batch_over: object = None
    resume: bool = False
    warmup: int = None
    final_local_pass: bool = True
    beta1: float = None
    beta2: float = None
    eps: float = None
    hess_init: float = None
    ess: float = None
    mc_samples: int = None
    components: int = None


def _integer(name, v, low, method):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < low:
        raise ValueError(f"fit({method!r}): {name} must be an integer >= {low}, got {v!r}")
    return int(v)


def _real(name, v, method, low=None, high=None, open_low=False):
    ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
    if ok and low is not None:
        ok = v > low if open_low else v >= low
    if ok and high is not None:
        ok = v <= high
    if not ok:
        lo = "" if low is None else (f"> {low}" if open_low else f">= {low}")
        hi = "" if high is None else f"<= {high}"
        rng = " and ".join(s for s in (lo, hi) if s)
        raise ValueError(f"fit({method!r}): {name} must be a finite number {rng}, got {v!r}")
    return float(v)


_INTEGERS = {"max_iter": 1, "restarts": 1, "local_iters": 1, "batch_size": 1, "epochs": 1,
             "max_steps": 1, "warmup": 0, "seed": 0}
_REALS = {"tol": (0.0, None, False), "local_tol": (0.0, None, False), "tau": (0.0, None, False),
          "rho": (0.0, 1.0, True), "kappa": (0.5, 1.0, True)}


def parse_options(method, options):
    """A :class:`FitOptions` from ``fit(method, **options)``; unknown options, options of
    another kind of method and out-of-range values raise, naming the option."""
    known = {f.name for f in fields(FitOptions)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"fit({method.name!r}) got unexpected options {unknown}; options are "
                        f"{sorted(known)}")
    wrong = STOCHASTIC if not method.stochastic else BATCH
    misplaced = sorted(k for k in options if k in wrong and options[k] is not None
                       and not (k == "resume" and options[k] is False))
    if misplaced:
        kind = "stochastic ('svi')" if not method.stochastic else "batch"
        raise TypeError(f"fit({method.name!r}): {misplaced} are options of the {kind} methods")
    defaults = {f.name: f.default for f in fields(FitOptions)}
    for k, v in options.items():
        if v is None:
            if defaults[k] is not None and not isinstance(defaults[k], bool):   # restarts=None
                raise TypeError(f"fit({method.name!r}): {k}=None is not a value; give a number "
                                f"or leave {k} out for its default {defaults[k]!r}")
            continue
        if k in _INTEGERS:
            options[k] = _integer(k, v, _INTEGERS[k], method.name)
        elif k in _REALS:
            low, high, open_low = _REALS[k]
            options[k] = _real(k, v, method.name, low, high, open_low)
    jobs = options.get("n_jobs")
    if jobs is not None:
        if isinstance(jobs, bool) or not isinstance(jobs, numbers.Integral) or \
                not (jobs >= 1 or jobs == -1):
            raise ValueError(f"fit({method.name!r}): n_jobs must be an integer >= 1 (partitions "
                             f"of the rows fitted in threads) or -1 (every core), got {jobs!r}")
        options["n_jobs"] = int(jobs)
    for k in ("progress", "resume", "local_restart", "final_local_pass", "rotate"):
        if options.get(k) is not None and not isinstance(options[k], bool):
            raise TypeError(f"fit({method.name!r}): {k} must be True or False, got {options[k]!r}")
    if options.get("callback") is not None and not callable(options["callback"]):
        raise TypeError(f"fit({method.name!r}): callback must be callable(iteration, elbo)")
    if options.get("epochs") is not None and options.get("max_steps") is not None:
        raise ValueError("fit('svi'): give epochs or max_steps, not both")
    if method.one_pass and options.get("restarts", 1) != 1:
        raise ValueError(f"fit({method.name!r}) is one exact update; restarts= has nothing to "
                         f"choose between")
    if method.one_pass and options.get("local_iters") is not None:
        raise ValueError(f"fit({method.name!r}) is one exact update; local_iters= is an option "
                         f"of the iterative methods ('vmp', 'ncvmp', 'em', 'map')")
    return FitOptions(**options)
