"""The gate's noise by eval size (docs/gate.md): standard errors of AUC,
of the paired and unpaired AUC difference and of calibration, from
trainer_module.paired_statistics on simulated CTR rows.

Rows: a latent score s ~ N(0, 1); the click probability
sigmoid(bias + 1.5 s) (AUC ~0.76); the model predicts it exactly (scaled
by CALIBRATION), the logistic regression sees s through noise (AUC ~0.01
lower). One sample per size, seed 0.

  .venv/bin/python docs/scripts/gate_noise.py
"""

import sys

import numpy as np

sys.path.insert(0, ".")
from trainer_module import paired_statistics  # pylint: disable=wrong-import-position

SIZES = (1_787, 4_000, 20_000, 200_000, 4_500_000)
# The click rates: Avazu's (the run) and Criteo's.
RATES = {"avazu": (-2.1, 0.17), "criteo": (-1.5, 0.25)}


def rows(n, bias, seed=0, calibration=1.0):
  rng = np.random.default_rng(seed)
  s = rng.normal(size=n)
  p = 1 / (1 + np.exp(-(bias + 1.5 * s)))
  labels = (rng.random(n) < p).astype(np.float64)
  lr = s + 0.35 * rng.normal(size=n)
  return labels, np.clip(p * calibration, 0, 1), lr


def main():
  z = paired_statistics.Z
  print("dataset  rows       CTR    AUC SE   diff SE paired  unpaired  "
        "calibration SE")
  for name, (bias, _) in RATES.items():
    for n in SIZES:
      labels, model, lr = rows(n, bias)
      aucs, cov = paired_statistics.delong(labels, model, lr)
      paired = paired_statistics.auc_difference(labels, model, lr)
      calibration = paired_statistics.calibration(labels, model)
      print(f"{name:8} {n:<10,} {labels.mean():.3f}  "
            f"{np.sqrt(cov[0, 0]):.5f}  {paired.standard_error:.5f}        "
            f"{np.sqrt(cov[0, 0] + cov[1, 1]):.5f}   "
            f"{calibration.standard_error:.4f}")
  # The refusal: calibration 1.103 on 1,787 Avazu eval rows.
  bias = RATES["avazu"][0]
  print("\nA model 10.3% over-predicting, 1,787 rows, 20 samples "
        "(seeds 0-19):")
  verdicts = []
  for seed in range(20):
    labels, model, _ = rows(1_787, bias, seed, calibration=1.103)
    estimate = paired_statistics.calibration(labels, model)
    low, high = estimate.interval()
    fixed = not 0.9 <= estimate.value <= 1.1
    noisy = high < 0.9 or low > 1.1
    verdicts.append((fixed, noisy))
    if seed < 5:
      print(f"  calibration {estimate.value:.3f} [{low:.3f}, {high:.3f}] "
            f"(SE {estimate.standard_error:.4f}): fixed band "
            f"{'refuses' if fixed else 'passes'}, noise-aware "
            f"{'refuses' if noisy else 'passes'}")
  print(f"  refused by the fixed band {sum(f for f, _ in verdicts)}/20, "
        f"by the noise-aware check {sum(n for _, n in verdicts)}/20 "
        f"(z = {z:.3f})")


if __name__ == "__main__":
  main()
