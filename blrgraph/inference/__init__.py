"""Inference: the BLR step, the algorithms as settings of it, the ELBO."""
from .blr import blr_step, blr_target
from .elbo import elbo, elbo_by_node
from .fit import fit
from .methods import METHODS, Method, get_method
from .result import FitResult
