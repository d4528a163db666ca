"""TFX ExampleGen for raw Criteo/Avazu text files."""

from components.raw_example_gen.component import RawCtrExampleGen
from components.raw_example_gen.executor import SUMMARY_FILE_NAME

__all__ = ["RawCtrExampleGen", "SUMMARY_FILE_NAME"]
