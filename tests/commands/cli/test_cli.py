"""CLI: arguments to config, and clear failures on bad input."""

import os
import re

import pytest

from commands.cli import flags
from commands.cli import main as cli
from commands.cli import parser as cli_parser
from commands.synthetic import generate
from conftest import run_command
from pipeline import metadata
from pipeline import progress


def _run(tmp_path, data, *extra):
  return cli.main(["run", "--dataset", "criteo", "--data", str(data),
                   "--output", str(tmp_path / "out"), *extra])


def test_arguments_become_config():
  args = cli_parser.build_parser().parse_args(
      ["run", "--dataset", "avazu", "--data", "d", "--output", "o",
       "--model", "dcnv2", "--batch-size", "8192", "--no-cowclip",
       "--scaling-rule", "sqrt", "--zeta", "1e-3", "--runner", "local",
       "--beam-arg=--direct_num_workers=2"])
  config = flags.config_from_args(args)
  assert (config.trainer.model, config.trainer.batch_size, config.trainer.step.cowclip) == ("dcnv2", 8192,
                                                                False)
  assert config.trainer.scaling_rule == "sqrt" and config.runner.dag_runner == "local"
  assert config.trainer.base_hparams["zeta"] == 1e-3
  assert config.trainer.base_hparams["dense_lr"] == 1e-4  # Avazu default kept.
  # Added to the defaults, replacing the default's value of that flag.
  assert config.runner.beam_args == ("--runner=FnApiRunner",
                                     "--direct_running_mode=in_memory",
                                     "--sdk_container_image="
                                     "apache/beam_python3.10_sdk",
                                     "--direct_num_workers=2")
  assert config.metadata_path == os.path.join("o", "metadata.sqlite")


def test_missing_input_fails_before_any_component(tmp_path, capsys):
  assert _run(tmp_path, tmp_path / "nope.txt") == progress.EXIT_FAILED
  assert "nope.txt" in capsys.readouterr().err
  assert not (tmp_path / "out").exists()


def test_a_missing_data_path_is_one_line_on_the_console(tmp_path):
  code, out, err = run_command(
      "run", "--dataset", "criteo", "--data", tmp_path / "nope",
      "--output", tmp_path / "out")
  assert code == progress.EXIT_FAILED
  assert out == ""
  assert err == f"error: input path '{tmp_path / 'nope'}' does not exist\n"
  assert not (tmp_path / "out").exists()


def test_generate_prints_its_summary_alone(tmp_path):
  """A command that computes on no device drops TensorFlow's import-time
  lines (CUDA, oneDNN, CPU features) and tf.Transform's Keras warning
  (--verbose shows them, as every command's)."""
  out_file = tmp_path / "g.txt"
  code, out, err = run_command("generate", "--format", "criteo", "--rows",
                               "20", "--seed", "0", "--out", out_file)
  assert code == 0 and err == "", err
  assert str(out_file) in out


def test_an_extracted_dac_tar_gz_names_test_txt_and_the_file_to_use(
    tmp_path):
  """dac.tar.gz holds train.txt, test.txt (no label column), readme.txt."""
  data = tmp_path / "dac"
  generate.write_synthetic("criteo", 50, 0, str(data / "train.txt"))
  rows = (data / "train.txt").read_text().splitlines()
  (data / "test.txt").write_text(
      "".join(r.split("\t", 1)[1] + "\n" for r in rows))
  (data / "readme.txt").write_text("Criteo Display Advertising Challenge\n")
  code, out, err = run_command(
      "run", "--dataset", "criteo", "--data", data,
      "--output", tmp_path / "out")
  assert code == progress.EXIT_FAILED and out == ""
  assert "Traceback" not in err
  lines = err.splitlines()
  assert lines[0] == "error: not criteo training data:"
  assert lines[1].startswith(f"  {data / 'readme.txt'}: not criteo data")
  assert lines[2].startswith(
      f"  {data / 'test.txt'}: Criteo's unlabelled test file (39 columns")
  assert lines[2].endswith(f"point --data at {data / 'train.txt'}")
  assert "--skip-foreign-files" in lines[3] and len(lines) == 4


def test_a_span_that_is_not_there_fails_before_any_component(tmp_path,
                                                             capsys):
  """Daily data: the span is resolved before anything runs, as TFX's
  driver will resolve it; the error names the spans there are."""
  generate.write_days("criteo", 20, 2, 0, str(tmp_path / "logs"))
  daily = str(tmp_path / "logs") + "/day-{SPAN}/"
  assert _run(tmp_path, daily, "--span", "4") == progress.EXIT_FAILED
  assert (f"span 4 of {tmp_path / 'logs'}/day-{{SPAN}}/* is not there: "
          "spans found: 1, 2") in capsys.readouterr().err
  assert _run(tmp_path, str(tmp_path / "none") + "/day-{SPAN}/"
             ) == progress.EXIT_FAILED
  assert "no path matches it" in capsys.readouterr().err
  plain = tmp_path / "logs" / "day-1" / "train.txt"
  assert _run(tmp_path, plain, "--span", "1") == progress.EXIT_FAILED
  assert "has no {SPAN} in it" in capsys.readouterr().err
  for choice in ("soon", "rolling:0", "2-1"):
    assert _run(tmp_path, daily, "--span", choice) == progress.EXIT_FAILED
    assert ("span must be 'latest', a span number, a range 'A-B' (days A "
            "to B, A <= B) or 'rolling:K' (the last K days, K >= 1), got "
            f"{choice!r}") in capsys.readouterr().err
  assert not (tmp_path / "out").exists()


def test_empty_input_directory_fails_before_any_component(tmp_path, capsys):
  (tmp_path / "data").mkdir()
  assert _run(tmp_path, tmp_path / "data") == progress.EXIT_FAILED
  assert "holds no files" in capsys.readouterr().err
  (tmp_path / "data" / "train.txt").write_text("")
  assert _run(tmp_path, tmp_path / "data") == progress.EXIT_FAILED
  assert "is empty" in capsys.readouterr().err


@pytest.mark.slow
def test_too_many_bad_rows_name_file_and_line(tmp_path, capsys):
  data = tmp_path / "train.txt"
  generate.write_synthetic("criteo", 300, 0, str(data))
  lines = data.read_text().splitlines()
  lines[41] = "\t".join(lines[41].split("\t")[:-2])  # Line 42: 38 fields.
  lines[99] = lines[99].replace("\t", "\tabc\t", 1)  # Line 100: 41 fields.
  data.write_text("\n".join(lines) + "\n")
  assert _run(tmp_path, data) == progress.EXIT_FAILED
  err = capsys.readouterr().err
  assert "train.txt" in err and "line 42" in err and "40" in err


@pytest.mark.slow
def test_one_class_labels_stop_before_transform_keeping_the_ingestion(
    tmp_path):
  """A wrong label column (here every label 0) stops at the validator,
  in one line naming each split and its labels from ExampleGen's counts;
  nothing is trained, and ExampleGen's and StatisticsGen's outputs stay
  published (a re-run reuses them) beside the run's report."""
  data = tmp_path / "train.txt"
  generate.write_synthetic("criteo", 400, 0, str(data))
  lines = ["0" + line[1:] for line in data.read_text().splitlines()]
  data.write_text("\n".join(lines) + "\n")
  out = tmp_path / "out"
  code, _, err = run_command("run", "--dataset", "criteo", "--data", data,
                             "--output", out)
  assert code == progress.EXIT_FAILED and "Traceback" not in err
  error = err.splitlines()[0]
  assert re.fullmatch(
      r"error: the train split has \d+ examples, all with label 0; the eval "
      r"split has \d+ examples, all with label 0: each split needs at least "
      r"5 examples with label 1 and 5 with label 0; check that column "
      r"'label' holds the clicks .*\(the pipeline stops before Transform\)",
      error), error
  assert f"artifacts already produced are kept under {out}" in err
  store = metadata.open_store(str(out / "metadata.sqlite"))
  states = {c.node: c.state for c in metadata.latest_pipeline_run(store)[1]}
  assert states["RawCtrExampleGen"] == states["StatisticsGen"] == "COMPLETE"
  assert states["StrictExampleValidator"] == "FAILED"
  assert "Transform" not in states and "Trainer" not in states
  assert metadata.ingestion_counts(store)["rows_read"] == 400
  examples = metadata.latest_artifact(store, "Examples")
  assert examples.custom_properties["train_clicks"].int_value == 0
  assert os.listdir(os.path.join(examples.uri, "Split-eval"))
  statistics = metadata.latest_artifact(store, "ExampleStatistics")
  assert os.listdir(os.path.join(statistics.uri, "Split-train"))
  assert (out / "report" / "index.html").is_file()


def test_activation_and_sampling_flags_become_settings():
  args = cli_parser.build_parser().parse_args(
      ["run", "--dataset", "criteo", "--data", "d", "--output", "o",
       "--activation", "smelu", "--smelu-beta", "0.5",
       "--negative-sampling-rate", "0.25"])
  settings = flags.config_from_args(args).trainer
  assert settings.model_options.activation == "smelu"
  assert settings.model_options.smelu_beta == 0.5
  assert settings.negative_sampling_rate == 0.25
  assert settings.to_custom_config()["model_options"] == {
      "activation": "smelu", "smelu_beta": 0.5}
  default = flags.config_from_args(cli_parser.build_parser().parse_args(
      ["run", "--dataset", "criteo", "--data", "d", "--output", "o"]))
  assert default.trainer.negative_sampling_rate == 1.0
  assert default.trainer.model_options.activation == "relu"
  with pytest.raises(ValueError, match="--smelu-beta.* only applies"):
    flags.config_from_args(cli_parser.build_parser().parse_args(
        ["run", "--dataset", "criteo", "--data", "d", "--output", "o",
         "--smelu-beta", "0.5"]))
  with pytest.raises(ValueError, match="negative_sampling_rate"):
    flags.config_from_args(cli_parser.build_parser().parse_args(
        ["run", "--dataset", "criteo", "--data", "d", "--output", "o",
         "--negative-sampling-rate", "0"]))


def test_study_takes_the_activation_and_the_sampling_rate():
  args = cli_parser.build_parser().parse_args(
      ["study", "--dataset", "criteo", "--data", "d", "--output", "o",
       "--activation", "smelu", "--smelu-beta", "2",
       "--negative-sampling-rate", "0.5"])
  trainer = flags.config_from_args(args).trainer
  assert (trainer.model_options.activation,
          trainer.model_options.smelu_beta) == ("smelu", 2.0)
  assert (trainer.negative_sampling_rate, trainer.epochs) == (0.5, 1)


def test_user_errors_are_one_line_internal_errors_show_the_traceback(
    tmp_path, capsys):
  try:
    raise ValueError("train.txt line 3: field I1 = 'x' is not an integer")
  except ValueError as error:  # Raised here to carry a traceback.
    user_error = error
  try:
    raise KeyError("node")
  except KeyError as error:
    internal_error = error
  assert cli.report_failure(user_error, False, None) == progress.EXIT_FAILED
  assert capsys.readouterr().err == (
      "error: train.txt line 3: field I1 = 'x' is not an integer\n")
  cli.report_failure(user_error, True, None)
  assert "Traceback" in capsys.readouterr().err
  cli.report_failure(internal_error, False, str(tmp_path))
  err = capsys.readouterr().err
  assert "Traceback" in err and "error: internal error: KeyError: 'node'" in err
  assert f"kept under {tmp_path}" in err


def test_a_beam_runner_beam_does_not_know_by_name_is_one_line(tmp_path,
                                                              capsys):
  """Beam's own refusal (`Unexpected pipeline runner`) would come from
  inside the first component; the run stops before it, naming the names
  Beam takes and the dotted path a runner outside them needs."""
  data = tmp_path / "train.txt"
  generate.write_synthetic("criteo", 50, 0, str(data))
  assert _run(tmp_path, data, "--beam-arg=--runner=DaskRunner") == (
      progress.EXIT_FAILED)
  err = capsys.readouterr().err
  assert err.startswith("error: unknown Beam runner 'DaskRunner'")
  assert "Traceback" not in err and len(err.splitlines()) == 1
  for name in ("FnApiRunner", "DirectRunner", "DataflowRunner",
               "PortableRunner", "FlinkRunner", "SparkRunner",
               "apache_beam.runners.dask.dask_runner.DaskRunner"):
    assert name in err
  assert not (tmp_path / "out").exists()
