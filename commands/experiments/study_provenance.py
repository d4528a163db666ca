"""What a study's rows record of where they came from, and what a resumed
study refuses: the data's fingerprint, the machine, the code's commit, and
the study-wide settings (study_settings.json).

A study's results may be resumed on another machine, from a fresh clone
(docs/study_paper_regime.sh): its rows must never mix other data or other
settings, and its speeds only compare between rows of one machine.
"""

import hashlib
import json
import os
import platform
import subprocess
from typing import Mapping, Sequence

import tensorflow_transform as tft

from pipeline import code_fingerprint
from pipeline.config import PipelineConfig


def data_fingerprint(tf_transform_output: tft.TFTransformOutput) -> str:
  """A hash of the Transform output's vocabularies (every field's ids with
  their training counts): the same for the same rows, regenerated on any
  machine, and different for other rows. A row of study.csv carries it,
  so that a resumed study never mixes rows trained on other data."""
  assets = os.path.join(tf_transform_output.transform_savedmodel_dir,
                        "assets")
  digest = hashlib.sha256()
  for name in sorted(os.listdir(assets)):
    digest.update(name.encode() + b"\0")
    with open(os.path.join(assets, name), "rb") as f:
      for chunk in iter(lambda: f.read(1 << 20), b""):
        digest.update(chunk)
  return digest.hexdigest()[:16]


# The CPU flags that set the step's speed (docs/benchmark.md).
_SPEED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")


def machine_description() -> str:
  """The CPU model, cores and speed-setting flags, e.g. "AMD EPYC, 2 cores,
  avx2 avx512f avx512_bf16": a study's rows may come from several
  machines, and only rows of one machine compare in speed."""
  model, flags_seen = platform.processor() or platform.machine(), set()
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        key, _, value = line.partition(":")
        if key.strip() == "model name":
          model = value.strip()
        elif key.strip() == "flags":
          flags_seen = set(value.split())
          break
  except OSError:
    pass
  return ", ".join([model, f"{os.cpu_count()} cores",
                    " ".join(f for f in _SPEED_FLAGS if f in flags_seen)])


def code_commit() -> str:
  """The git commit of the code (with "+changes" when its tracked files
  differ from it); "" outside a git checkout."""
  def git(*args):
    return subprocess.run(["git", "-C", code_fingerprint.REPO_ROOT, *args],
                          capture_output=True, text=True, check=False)
  head = git("rev-parse", "--short=12", "HEAD")
  if head.returncode != 0:
    return ""
  changed = git("diff", "--quiet", "HEAD", "--",
                *code_fingerprint.PROJECT_PACKAGES).returncode != 0
  return head.stdout.strip() + ("+changes" if changed else "")


def check_fingerprints(rows: Sequence[Mapping[str, object]], path: str,
                       fingerprint: str) -> None:
  """Refuses a study.csv holding rows of other data.

  Raises:
    ValueError: naming the first such row, both fingerprints, and what to do.
  """
  for row in rows:
    if row.get("data_fingerprint") not in ("", fingerprint):
      raise ValueError(
          f"{path}: run {row['run']} was trained on other data (data "
          f"fingerprint {row['data_fingerprint']}, this data's {fingerprint}"
          "): regenerate the data with the command its study.md names, or "
          "give another --results")


STUDY_SETTINGS = "study_settings.json"
# Trainer settings that vary between a study's runs (run_config; also
# step.cowclip, which the study's own config leaves at its default).
PER_RUN_SETTINGS = ("model", "batch_size", "scaling_rule")
# Trainer settings a study's runs never use: each trains from scratch, with
# no served model to warm-start from. Left out, so that studies recorded
# before such a setting existed still resume.
UNUSED_BY_STUDIES = ("warm_start",)


def check_study_settings(config: PipelineConfig, results: str) -> None:
  """Records the study-wide trainer settings in the study DIR, and refuses
  to resume a study whose settings differ (runs are found by key, and the
  key does not say the activation, the sampling rate, ...).

  Raises:
    ValueError: naming the settings that differ and their values.
  """
  study_wide = config.trainer.to_custom_config()
  study_wide["step"].pop("cowclip", None)
  wanted = json.loads(json.dumps({
      k: v for k, v in study_wide.items()
      if k not in PER_RUN_SETTINGS + UNUSED_BY_STUDIES}))
  path = os.path.join(results, STUDY_SETTINGS)
  if os.path.exists(path):
    with open(path) as f:
      recorded = json.load(f)
    changed = sorted(k for k in set(wanted) | set(recorded)
                     if wanted.get(k) != recorded.get(k))
    if changed:
      raise ValueError(
          f"{config.output} holds a study with other settings ("
          + "; ".join(f"{k}: {recorded.get(k)!r}, now {wanted.get(k)!r}"
                      for k in changed)
          + "); give another --results or --output")
    return
  os.makedirs(results, exist_ok=True)
  with open(path, "w") as f:
    json.dump(wanted, f, indent=2, sort_keys=True)
