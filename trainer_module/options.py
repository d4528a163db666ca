"""Settings declared once: a dataclass field that is also a command-line flag.

Every setting of a run is one field of one settings dataclass: the
Trainer's (settings.TrainerSettings with its StepOptions and ModelOptions,
settings.TuningSettings) and the pipeline's (pipeline.config: ingestion,
gate, runner). `option()`
makes such a field and records beside its default what its flag needs: the
help, the choices, how to parse the text. commands/cli/flags.py builds the
argparse groups from these fields and reads them back, and `check_choices`
validates every choice field, so the name, the default and the choices of a
setting are written in one place. `group()` nests a settings dataclass in
another (its flags join the parent's). No TensorFlow here.
"""

import dataclasses
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

# The metadata keys of option and group fields.
OPTION = "option"
GROUP = "group"


@dataclasses.dataclass(frozen=True)
class Option:
  """What the flag of one setting needs, besides its name and default.

  Attributes:
    help: what the setting does, for --help.
    choices: the allowed values (checked by check_choices and by argparse).
    parse: text -> value (argparse `type`); None: the default's type.
    metavar: how --help shows the value.
    flag: the flag, if not --field-name (a boolean that defaults to True
      gets --no-field-name).
    none_flag: a second flag that sets the setting to None (no check).
    repeat: the flag may be given several times; the values form a tuple.
    add: for a repeated flag, (default, the values given) -> the setting:
      how the values join the default (None: they replace it).
    keys: for a mapping setting, its (key, flag, help) entries: one float
      flag per key, and the mapping holds the keys given.
  """
  help: str
  choices: Optional[Tuple[Any, ...]] = None
  parse: Optional[Callable[[str], Any]] = None
  metavar: Optional[str] = None
  flag: Optional[str] = None
  none_flag: Optional[str] = None
  repeat: bool = False
  add: Optional[Callable[[Any, Any], Any]] = None
  keys: Tuple[Tuple[str, str, str], ...] = ()

  def flag_of(self, name: str, default: Any) -> str:
    """The flag of the field `name` with this option and `default`."""
    if self.flag:
      return self.flag
    negated = "no-" if default is True else ""
    return f"--{negated}{name.replace('_', '-')}"


def option(default: Any, help: str, **flag: Any) -> Any:  # pylint: disable=redefined-builtin
  """A dataclass field holding a setting, with its flag's description
  (`flag`: the other fields of Option)."""
  metadata = {OPTION: Option(help=help, **flag)}
  if isinstance(default, (dict, list)):
    return dataclasses.field(default_factory=lambda: type(default)(default),
                             metadata=metadata)
  return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class Group:
  """Nested settings: their class, and the argparse group of their flags."""
  settings: Any
  title: str
  description: str


def group(settings: Any, title: str, description: str,
          default: Any = dataclasses.MISSING) -> Any:
  """A dataclass field holding nested settings of class `settings` (e.g.
  the model's architecture), by default settings(); `default` for one
  that needs arguments (e.g. None, filled in by the parent)."""
  metadata = {GROUP: Group(settings, title, description)}
  if default is dataclasses.MISSING:
    return dataclasses.field(default_factory=settings, metadata=metadata)
  return dataclasses.field(default=default, metadata=metadata)


def option_fields(cls: Any) -> Iterator[Tuple[dataclasses.Field, Option]]:
  """The fields of the dataclass `cls` that are settings with a flag."""
  for field in dataclasses.fields(cls):
    if OPTION in field.metadata:
      yield field, field.metadata[OPTION]


def from_values(cls: Any, values: Dict[str, Any], **fixed: Any) -> Any:
  """Settings of class `cls` from values named flat, as the flags give
  them: each field takes its value from `values` (removed from it as they
  are used; a mapping with keys also from its keys' names), nested settings
  are built the same way, and the rest keep their defaults (an option with
  `add` joins its values to its default). `fixed` fills the fields of those
  names at every level (e.g. the dataset)."""
  given = {}
  for field in dataclasses.fields(cls):
    if field.name in fixed:
      given[field.name] = fixed[field.name]
    elif field.name in values:  # Given whole (nested settings too).
      value = values.pop(field.name)
      described = field.metadata.get(OPTION)
      if described is not None and described.add is not None:
        value = described.add(default_of(field), value)
      given[field.name] = value
    elif GROUP in field.metadata:
      given[field.name] = from_values(field.metadata[GROUP].settings, values,
                                      **fixed)
    elif OPTION in field.metadata:
      keys = {key: values.pop(key) for key, _, _ in
              field.metadata[OPTION].keys if key in values}
      if keys:
        given[field.name] = keys
  return cls(**given)


def default_of(field: dataclasses.Field) -> Any:
  """A field's default value."""
  if field.default_factory is not dataclasses.MISSING:
    return field.default_factory()
  return field.default


def check_choices(settings: Any) -> None:
  """Refuses a value outside its field's choices, naming the field."""
  for field, described in option_fields(type(settings)):
    value = getattr(settings, field.name)
    if described.choices and value not in described.choices:
      raise ValueError(f"unknown {field.name} {value!r}; choose one of "
                       f"{tuple(described.choices)}")


def comma_separated(convert: Callable[[str], Any], what: str
                   ) -> Callable[[str], Tuple[Any, ...]]:
  """A flag parser: 'a,b' -> (convert('a'), convert('b')); argparse names
  `what` when a value does not convert."""
  def parse(text: str) -> Tuple[Any, ...]:
    return tuple(convert(v.strip()) for v in text.split(",") if v.strip())
  parse.__name__ = what
  return parse
