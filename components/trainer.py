"""TFX's Trainer, whose examples may be a rolling window of days.

The run_fn (trainer_module.trainer.run_fn) and everything TFX gives it are
TFX's own; the executor only expands a window of spans
(components/span_window.py) into the days' Examples first, so
`fn_args.train_files` and `eval_files` hold every day's files.
"""

from tfx import v1 as tfx
from tfx.components.trainer import executor as trainer_executor
from tfx.dsl.components.base import executor_spec

from components import span_window


class Executor(trainer_executor.GenericExecutor):
  """TFX's GenericExecutor on the window's days."""

  def Do(self, input_dict, output_dict, exec_properties) -> None:
    super().Do(span_window.expand_input(input_dict), output_dict,
               exec_properties)


class Trainer(tfx.components.Trainer):
  """tfx.components.Trainer reading every day of a window of spans."""
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
