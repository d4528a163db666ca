"""The command-line flags, built from the settings' own fields.

Each setting is declared once, as a field that carries its help, choices
and default (trainer_module.options). `add_settings` turns the fields of
the PipelineConfig tree into argparse groups (one per settings group), and
`config_from_args` reads the parsed flags back into a PipelineConfig
(options.from_values puts each in the group that declares it). A command
picks the fields it offers, and says in one line where its default
differs. Flags the user did not give are absent from the parsed arguments
(argparse.SUPPRESS), so the fields keep their declared defaults.
"""

import argparse
import dataclasses
from typing import Any, Callable, Collection, List, Mapping, Optional
from typing import Sequence

from commands.experiments import tuned_hparams
from pipeline.config import PipelineConfig
from trainer_module import features
from trainer_module import options


def int_list(text: str) -> List[int]:
  """'1024,8192' -> [1024, 8192] (argparse type), positive ints only."""
  try:
    values = [int(v) for v in text.split(",") if v.strip()]
  except ValueError:
    raise argparse.ArgumentTypeError(
        f"expected comma-separated integers, got {text!r}") from None
  if not values or any(v <= 0 for v in values):
    raise argparse.ArgumentTypeError(
        f"expected positive integers, got {text!r}")
  return values


def choice_list(choices: Sequence[str],
                what: str) -> Callable[[str], List[str]]:
  """An argparse type: 'a,b' -> ['a', 'b'], each one of `choices`."""
  def parse(text: str) -> List[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in values if v not in choices]
    if not values or unknown:
      raise argparse.ArgumentTypeError(
          f"unknown {what} {unknown or text!r}; choose from "
          f"{','.join(choices)}")
    return values
  return parse


def add_input_arguments(parser: argparse.ArgumentParser, output_help: str,
                        data_help: str = "raw file, or directory of raw "
                        "files", **output: Any) -> None:
  """--dataset, --data and --output, shared by every pipeline command
  (`output`: more add_argument keywords of --output, e.g. its dest)."""
  parser.add_argument("--dataset", required=True,
                      choices=sorted(features.DATASETS))
  parser.add_argument("--data", required=True, help=data_help)
  parser.add_argument("--output", required=True, help=output_help, **output)


def add_settings(parser: argparse.ArgumentParser, settings: Any = PipelineConfig,
                 only: Optional[Collection[str]] = None,
                 skip: Collection[str] = (),
                 defaults: Optional[Mapping[str, Any]] = None) -> None:
  """Adds the flags of the settings class `settings` and of the settings
  nested in it, one argparse group per settings group.

  Args:
    parser: the command's parser.
    settings: the settings class (default: the whole PipelineConfig).
    only: the fields offered, by name; a group's name offers all its
      fields (None: every field with a flag).
    skip: fields (or groups) not offered, by name.
    defaults: the command's own defaults, by field name.
  """
  defaults = dict(defaults or {})
  unknown = set(defaults) - set(setting_names(settings))
  if unknown:
    raise ValueError(f"defaults for unknown settings {sorted(unknown)}")
  _add_fields(parser, settings, only, skip, defaults, None)


def _add_fields(parser: argparse.ArgumentParser, settings: Any,
                only: Optional[Collection[str]], skip: Collection[str],
                defaults: Mapping[str, Any], group: Any) -> None:
  for field in dataclasses.fields(settings):
    if field.name in skip:
      continue
    offered = only is None or field.name in only
    if options.GROUP in field.metadata:
      nested = field.metadata[options.GROUP]
      inner = None if offered else only
      if _offers(nested.settings, inner, skip):
        _add_fields(parser, nested.settings, inner, skip, defaults,
                    parser.add_argument_group(nested.title,
                                              nested.description))
    elif options.OPTION in field.metadata and offered:
      _add_option(group or parser, field, field.metadata[options.OPTION],
                  defaults)


def _offers(settings: Any, only: Optional[Collection[str]],
            skip: Collection[str]) -> bool:
  """Whether _add_fields would add a flag of `settings` (no empty groups
  in --help)."""
  for field in dataclasses.fields(settings):
    if field.name in skip:
      continue
    offered = only is None or field.name in only
    if options.GROUP in field.metadata:
      if _offers(field.metadata[options.GROUP].settings,
                 None if offered else only, skip):
        return True
    elif options.OPTION in field.metadata and offered:
      return True
  return False


def _add_option(group: Any, field: dataclasses.Field, option: options.Option,
                defaults: Mapping[str, Any]) -> None:
  """The flag(s) of one setting."""
  declared = options.default_of(field)
  default = defaults.get(field.name, argparse.SUPPRESS)
  for key, flag, help_text in option.keys:
    group.add_argument(flag, dest=key, type=float, default=argparse.SUPPRESS,
                       help=help_text)
  if option.keys:
    return
  flag = option.flag_of(field.name, declared)
  shown = defaults.get(field.name, declared)
  described = option.help + (
      f" (default: {_show(shown)})" if shown not in (None, True, False, ())
      else "")
  if isinstance(declared, bool):  # A switch; --no-NAME turns one off.
    group.add_argument(flag, dest=field.name, default=default,
                       action="store_false" if declared else "store_true",
                       help=f"turn off: {option.help}" if declared
                       else described)
    return
  parse = option.parse or (type(declared) if declared is not None else str)
  if option.repeat:
    group.add_argument(flag, dest=field.name, action="append", default=default,
                       help=described)
  else:
    group.add_argument(flag, dest=field.name, type=parse, default=default,
                       choices=option.choices, metavar=option.metavar,
                       help=described)
  if option.none_flag:
    group.add_argument(option.none_flag, dest=field.name,
                       action="store_const", const=None,
                       default=argparse.SUPPRESS, help=f"see {flag}")


def _show(value: Any) -> str:
  if isinstance(value, tuple):
    return ",".join(map(str, value))
  return str(value)


def setting_names(settings: Any = PipelineConfig) -> List[str]:
  """The names of every setting in `settings` and the groups nested in it
  (fields, groups and a mapping's keys): each is a flag's dest, so none may
  appear twice."""
  names = []
  for field in dataclasses.fields(settings):
    names.append(field.name)
    if options.GROUP in field.metadata:
      names.extend(setting_names(field.metadata[options.GROUP].settings))
    elif options.OPTION in field.metadata:
      names.extend(key for key, _, _ in field.metadata[options.OPTION].keys)
  return names


def config_from_args(args: argparse.Namespace) -> PipelineConfig:
  """The PipelineConfig of parsed flags (those of add_settings, and the
  input flags)."""
  values = vars(args).copy()
  tuning = values.get("tune", False)
  given = [f"--{name}" for name in ("trials", "tuner") if name in values]
  if given and not tuning:
    raise ValueError(f"{', '.join(given)} only apply with --tune")
  if values.get("search_space"):
    # Read only when given: the tuner imports Keras, KerasTuner and TFX.
    from trainer_module import tuner  # pylint: disable=g-import-not-at-top
    values["search_space"] = tuner.load_search_space(
        values["search_space"], args.dataset,
        values.get("tune_model_size", False))
  if values.get("hparams_from"):
    values["hparams_from"] = tuned_hparams.resolve_hparams_dir(values["hparams_from"],
                                                      args.dataset)
  return options.from_values(PipelineConfig, values, dataset=args.dataset,
                             data=args.data, output=args.output)


def settings_from_args(args: argparse.Namespace, settings: Any,
                       **fixed: Any) -> Any:
  """Settings of class `settings` (e.g. TrainerSettings) from parsed
  flags, for the commands that do not build a pipeline (`fixed`: its
  required fields, e.g. the dataset)."""
  return options.from_values(settings, vars(args).copy(), **fixed)

