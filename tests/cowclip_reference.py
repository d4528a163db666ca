"""CowClip as a plain NumPy transcription of cowclip.py's formula, the
reference the clip and the training step are checked against."""

import numpy as np


def reference_clip(grad, table, ids, r, zeta, variant="paper"):
  """The formula of cowclip.py's module docstring, one id at a time: the
  rows of ``ids`` clipped, the others as given."""
  out = np.array(grad, np.float64)
  flat = np.asarray(ids).reshape(-1)
  dim = table.shape[1]
  for k in np.unique(flat):
    cnt = np.sum(flat == k)
    w_norm = np.linalg.norm(table[k].astype(np.float64))
    if variant == "paper":
      clip = cnt * max(r * w_norm, zeta)
    else:
      clip = cnt * r * max(w_norm, r * np.sqrt(dim) * zeta)
    g_norm = np.linalg.norm(out[k])
    if g_norm > 0:
      out[k] *= min(1.0, clip / g_norm)
  return out
