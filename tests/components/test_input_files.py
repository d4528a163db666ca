"""Which input files are training data: judged by their first lines."""

import gzip

import pytest

from components.raw_example_gen import input_files
from components.raw_example_gen import rows
from trainer_module import features

CRITEO = features.CRITEO
AVAZU = features.AVAZU
CRITEO_ROW = "1\t" + "\t".join(["5"] * 13 + ["68fd1e64"] * 26)
AVAZU_HEADER = ",".join(AVAZU.columns)
AVAZU_ROW = ",".join(["1000009418151094273", "0", "14102100"] +
                     ["1"] * 21)


def _write(path, text, gzipped=False):
  data = text.encode()
  path.write_bytes(gzip.compress(data) if gzipped else data)
  return str(path)


@pytest.mark.parametrize("gzipped", [False, True])
def test_training_files_plain_or_gzipped(tmp_path, gzipped):
  name = "train.txt.gz" if gzipped else "train.txt"
  path = _write(tmp_path / name, CRITEO_ROW + "\n", gzipped)
  assert input_files.foreign_reason(path, CRITEO) is None
  assert input_files.read_first_line(path) == CRITEO_ROW.encode() + b"\n"
  path = _write(tmp_path / ("a" + name), AVAZU_HEADER + "\n" + AVAZU_ROW,
                gzipped)
  assert input_files.foreign_reason(path, AVAZU) is None


def test_a_bad_first_row_does_not_make_a_data_file_foreign(tmp_path):
  path = _write(tmp_path / "train.txt", "1\t2\n" + CRITEO_ROW + "\n")
  assert input_files.foreign_reason(path, CRITEO) is None


def test_unlabelled_test_files_are_recognised(tmp_path):
  criteo_test = _write(tmp_path / "test.txt",
                       CRITEO_ROW.split("\t", 1)[1] + "\n")
  assert input_files.foreign_reason(criteo_test, CRITEO) == (
      input_files.UNLABELLED)
  header = ",".join(c for c in AVAZU.columns if c != AVAZU.label)
  avazu_test = _write(tmp_path / "test", header + "\n1,2\n")
  assert input_files.foreign_reason(avazu_test, AVAZU) == (
      input_files.UNLABELLED)


def test_dac_directory_names_test_txt_and_the_file_to_use(tmp_path):
  train = _write(tmp_path / "train.txt", CRITEO_ROW + "\n")
  test = _write(tmp_path / "test.txt", CRITEO_ROW.split("\t", 1)[1] + "\n")
  readme = _write(tmp_path / "readme.txt", "Criteo\nDisplay Advertising\n")
  with pytest.raises(input_files.ForeignFilesError) as error:
    input_files.check_files([readme, test, train], CRITEO, False)
  lines = str(error.value).splitlines()
  assert lines[1].strip().startswith(f"{readme}: not criteo data")
  assert lines[2].strip() == (
      f"{test}: Criteo's unlabelled test file (39 columns: Criteo's layout "
      "without the label column 'label'); it cannot be trained or evaluated "
      f"on: point --data at {train}")
  assert "--skip-foreign-files" in lines[3]
  kept = input_files.check_files([readme, test, train], CRITEO, True)
  assert kept.data == (train,) and set(kept.foreign) == {readme, test}


def test_archives_and_other_compression_are_named(tmp_path):
  tar = _write(tmp_path / "dac.tar.gz", "x", gzipped=True)
  assert "extract it first (tar -xzf dac.tar.gz)" in (
      input_files.foreign_reason(tar, CRITEO))
  assert "tar -xf dac.tar" in input_files.foreign_reason(
      _write(tmp_path / "dac.tar", "x"), CRITEO)
  assert "only .gz is" in input_files.foreign_reason(
      _write(tmp_path / "train.txt.bz2", "x"), CRITEO)
  assert "not a text file in gzip" in input_files.foreign_reason(
      _write(tmp_path / "train.gz", "not gzip"), CRITEO)


def test_a_header_of_the_wrong_columns_still_fails_naming_them(tmp_path):
  path = _write(tmp_path / "bad.csv", "label,I1\n1,2\n")
  with pytest.raises(rows.HeaderError, match=r"bad.csv: .*'I2'"):
    input_files.foreign_reason(path, CRITEO)
