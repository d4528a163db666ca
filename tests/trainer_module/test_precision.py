"""`--precision auto`: the probe's rule, its record and the model it builds."""

import os

import keras
import pytest

from trainer_module import models
from trainer_module import precision


def _probe_at(monkeypatch, speedup):
  measured = {"float32_gflops": 100.0, "bfloat16_gflops": 100.0 * speedup,
              "bf16_speedup": speedup, "probe_seconds": 0.1}
  monkeypatch.setattr(precision, "probe", lambda: measured)
  return measured


def test_an_explicit_precision_is_kept_without_probing(monkeypatch):
  monkeypatch.setattr(precision, "probe", lambda: pytest.fail("probed"))
  for name in (precision.FLOAT32, precision.MIXED_BFLOAT16):
    assert precision.resolve(name) == (name, {})


@pytest.mark.parametrize("speedup, chosen", [
    (precision.BF16_MIN_SPEEDUP - 1e-9, precision.FLOAT32),
    (precision.BF16_MIN_SPEEDUP, precision.MIXED_BFLOAT16),
    (0.53, precision.FLOAT32),  # bf16 emulated: slower.
    (1.8, precision.MIXED_BFLOAT16)])
def test_auto_picks_bf16_from_the_measured_speedup(monkeypatch, speedup,
                                                   chosen):
  measured = _probe_at(monkeypatch, speedup)
  assert precision.resolve(precision.AUTO) == (chosen, measured)


def test_auto_keeps_its_first_choice_for_the_next_runs(monkeypatch, tmp_path):
  kept_in = str(tmp_path / "precision")
  first = _probe_at(monkeypatch, 1.8)
  chosen, record = precision.resolve(precision.AUTO, kept_in)
  assert chosen == precision.MIXED_BFLOAT16 and record["probed_now"]
  assert record["kept_at"].startswith(kept_in)
  # A later probe under load would choose float32: the kept choice wins.
  _probe_at(monkeypatch, 0.9)
  chosen, record = precision.resolve(precision.AUTO, kept_in)
  assert chosen == precision.MIXED_BFLOAT16 and not record["probed_now"]
  assert {k: record[k] for k in first} == first
  # An explicit precision is the user's, kept choice or not.
  assert precision.resolve(precision.FLOAT32, kept_in) == (
      precision.FLOAT32, {})


def test_another_kind_of_machine_probes_afresh(monkeypatch, tmp_path):
  kept_in = str(tmp_path)
  _probe_at(monkeypatch, 1.8)
  precision.resolve(precision.AUTO, kept_in)
  monkeypatch.setattr(precision, "machine_kind", lambda: "another CPU")
  _probe_at(monkeypatch, 0.9)
  chosen, record = precision.resolve(precision.AUTO, kept_in)
  assert chosen == precision.FLOAT32 and record["probed_now"]
  assert len(os.listdir(kept_in)) == 2


def test_the_machine_kind_names_the_cpu_and_its_bf16_flags():
  kind = precision.machine_kind()
  with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
    text = cpuinfo.read()
  model = next(line.split(":", 1)[1].strip() for line in text.splitlines()
               if line.startswith("model name"))
  assert kind.startswith(model + "; ")
  assert ("avx512_bf16" in kind) == ("avx512_bf16" in text.split())
  assert f"{os.cpu_count()} cores" in kind


def test_the_probe_measures_both_rates():
  measured = precision.measure()
  assert measured["float32_gflops"] > 0 and measured["bfloat16_gflops"] > 0
  assert measured["bf16_speedup"] == pytest.approx(
      measured["bfloat16_gflops"] / measured["float32_gflops"])
  assert measured["probe_seconds"] > 0


@pytest.mark.parametrize("speedup, policy", [(1.0, "float32"),
                                             (2.0, "mixed_bfloat16")])
def test_auto_builds_the_model_in_the_chosen_policy(monkeypatch, speedup,
                                                    policy):
  _probe_at(monkeypatch, speedup)
  model = models.build_model(
      "deepfm", {"a": 5, "b": 3}, ("x",),
      models.ModelOptions(embedding_dim=2, hidden_units=(4,),
                          precision=precision.AUTO))
  dense = [layer for layer in model.dnn.layers
           if isinstance(layer, keras.layers.Dense)]
  assert {layer.dtype_policy.name for layer in dense} == {policy}
  # The tables and their gradients stay float32 (CowClip's norms).
  assert {v.dtype for v in model.split_variables()[0]} == {"float32"}
