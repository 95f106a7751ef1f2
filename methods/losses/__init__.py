"""Self-supervised losses, one loss per file (a pure function, with its helpers)."""

from methods.losses.byol import byol_loss
from methods.losses.nt_xent import nt_xent
from methods.losses.simsiam import simsiam_loss
from methods.losses.spectral import correlation_matrix, norm_clip, spectral_contrastive

__all__ = ["byol_loss", "correlation_matrix", "norm_clip", "nt_xent", "simsiam_loss", "spectral_contrastive"]
