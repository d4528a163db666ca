"""The parser: TF-free, and `run`'s Beam runner flags (shared with
compile-kubeflow, commands.cli.beam_flags)."""

import subprocess
import sys

import pytest

from commands.cli import beam_flags
from commands.cli import parser as cli_parser
from pipeline import config as config_lib
from pipeline.code_fingerprint import REPO_ROOT

RUN = ["run", "--dataset", "criteo", "--data", "d", "--output", "o"]
# What the command line must not wait for before it answers.
HEAVY_MODULES = ("tensorflow", "tfx", "apache_beam", "keras",
                 "tensorflow_transform", "matplotlib")


def test_building_the_parser_and_parsing_run_imports_no_heavy_library():
  """In a fresh process: this one has imported them for other tests."""
  code = ("import sys\n"
          "from commands.cli import parser\n"
          f"parser.build_parser().parse_args({RUN!r})\n"
          f"print([m for m in {HEAVY_MODULES!r} if m in sys.modules])\n")
  done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                        text=True, check=True)
  assert done.stdout == "[]\n", done.stderr


def _config(*extra):
  return beam_flags.config_from_args(
      cli_parser.build_parser().parse_args(RUN + list(extra)))


def test_run_keeps_the_direct_runner_by_default_and_takes_beam_args():
  assert _config().runner.beam_args == config_lib.DIRECT_BEAM_ARGS
  assert _config("--beam-arg=--direct_num_workers=2").runner.beam_args == (
      config_lib.DIRECT_BEAM_ARGS[:2] + config_lib.DIRECT_BEAM_ARGS[3:]
      + ("--direct_num_workers=2",))


def test_run_on_flink_through_a_job_server_and_a_worker_pool():
  config = _config("--beam-runner", "flink", "--job-endpoint",
                   "localhost:8099", "--environment-type", "EXTERNAL",
                   "--environment-config", "localhost:50000",
                   "--beam-arg=--parallelism=2")
  # The pool's workers are this machine's, not the pipeline image: the job
  # stages this checkout for them (kubeflow/sdk_worker_boot.py).
  assert config.runner.beam_args == (
      "--runner=PortableRunner", "--job_endpoint=localhost:8099",
      "--environment_type=EXTERNAL", "--environment_config=localhost:50000",
      f"--setup_file={REPO_ROOT}/pyproject.toml", "--parallelism=2")
  assert config.runner.beam_args[:5] == config_lib.beam_pipeline_args(
      "flink", job_endpoint="localhost:8099", environment_type="EXTERNAL",
      environment_config="localhost:50000",
      setup_file=f"{REPO_ROOT}/pyproject.toml")


def test_run_with_docker_workers_needs_their_image():
  """compile-kubeflow's workers run --image; `run` has none to offer."""
  with pytest.raises(ValueError, match="needs environment_config"):
    _config("--beam-runner", "spark", "--job-endpoint", "localhost:8099")
  assert _config("--beam-runner", "spark", "--job-endpoint", "js:8099",
                 "--environment-config", "me/sdk:1").runner.beam_args[2:] == (
                     "--environment_type=DOCKER",
                     "--environment_config=me/sdk:1")



def test_a_pod_s_workers_run_the_image_and_stage_nothing():
  """compile-kubeflow: the worker pool is the pipeline image's sidecar; only
  a spec for this machine (--for-local-run) stages the checkout."""
  compile_args = ["compile-kubeflow", "--dataset", "criteo", "--data",
                  "gs://b/d/", "--output", "p.yaml", "--pipeline-root",
                  "gs://b/root", "--image", "me/pipeline:1", "--beam-runner",
                  "flink", "--job-endpoint", "js:8099", "--environment-type",
                  "EXTERNAL", "--environment-config", "localhost:50000"]
  def beam_args(*extra):
    args = cli_parser.build_parser().parse_args(compile_args + list(extra))
    return beam_flags.config_from_args(args, image=args.image).runner.beam_args
  assert not [a for a in beam_args() if a.startswith("--setup_file")]
  assert f"--setup_file={REPO_ROOT}/pyproject.toml" in beam_args(
      "--for-local-run")
