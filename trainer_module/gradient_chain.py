"""The embedding tables' gradient, as a chain of small transforms.

The training step (training.Step) takes the tape's gradients of the tables
and runs them down one chain, composed once from the step's options the
way optax chains its transforms:

  gather_replicas    the global batch's ids, gradient slices and weights
  batch_rows         one row per distinct id of each field (cowclip.
                     distinct_ids, once per field for its deep and wide
                     tables): the sum of its examples' slices, and W_k
  add_l2(l2, dense)  + 2 * l2 * W_k on those rows, and the loss's L2 term
                     (over the whole table with the dense update)
  clip_deep_rows     the deep tables' rows clipped (cowclip.
                     clip_gradient_rows); wide tables are never clipped
  table_gradients    what the optimizer applies: tf.IndexedSlices of the
                     batch's rows (sparse update), or the whole [V, d]
                     gradient with the batch's rows in place and every other
                     row's 2 * l2 * W (dense)

Each transform is a pure function of the chain's state (TableRows); a
new transform (another clip, a noise term) is one more function in the
list, and the step does not change. The maths is cowclip.py's; the order
of the floating-point operations is the one the step has always had, so
the chain gives the same bits.
"""

import functools
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

import tensorflow as tf

from trainer_module import cowclip
from trainer_module import distribution

Gradient = cowclip.Gradient


class Table(NamedTuple):
  """One embedding table as the chain sees it.

  Attributes:
    variable: the [V, d] table.
    field: the index of its field (the ids it is looked up with).
    deep: a deep table (CowClip clips it); False: a wide one.
  """
  variable: object
  field: int
  deep: bool


class TableRows(NamedTuple):
  """The chain's state: every table's gradient on the batch's ids.

  Attributes:
    tables: the tables, in the model's split_variables order.
    field_ids: each field's [global batch] ids.
    weights: the examples' [global batch, 1] importance weights (None: 1).
    gradients: before batch_rows, the tape's gradients (IndexedSlices with
      one slice per example, or dense [V, d]); after it, None.
    distinct: each field's cowclip.DistinctIds (after batch_rows).
    rows: each table's cowclip.GradientRows on its field's distinct ids.
    dense_data: each table's dense [V, d] data gradient (None: the
      tape's was slices, as an embedding lookup's is).
    squared_norms: each table's sum(W^2) over what the L2 term covers.
    clipped, batch_ids: each clipped table's count of clipped and of
      distinct ids (cowclip.ClipResult).
  """
  tables: Tuple[Table, ...]
  field_ids: Tuple[tf.Tensor, ...]
  weights: Optional[tf.Tensor]
  gradients: Optional[Tuple[Gradient, ...]] = None
  distinct: Tuple[cowclip.DistinctIds, ...] = ()
  rows: Tuple[cowclip.GradientRows, ...] = ()
  dense_data: Tuple[Optional[tf.Tensor], ...] = ()
  squared_norms: Tuple[tf.Tensor, ...] = ()
  clipped: Tuple[tf.Tensor, ...] = ()
  batch_ids: Tuple[tf.Tensor, ...] = ()


Transform = Callable[[TableRows], TableRows]


def chain(*transforms: Transform) -> Transform:
  """The transforms applied in order (optax.chain, for this state)."""
  return lambda state: functools.reduce(lambda s, t: t(s), transforms, state)


def tables_of(model) -> Tuple[Table, ...]:
  """A models.CTRModel's tables in its split_variables order: each field's
  deep table (if any), then its wide one."""
  return tuple(Table(variable, field, deep)
               for field, (_, deep_table, wide_table)
               in enumerate(model.embedding_tables())
               for variable, deep in ((deep_table, True), (wide_table, False))
               if variable is not None)


def gather_replicas(state: TableRows) -> TableRows:
  """The global batch's ids, gradient slices and importance weights (one
  device: as given).

  An embedding lookup's gradient has one slice per example, in the order
  of its field's ids, so the replicas' slices and ids gathered in replica
  order are the global batch's lookup gradient. They travel in one gather
  per dtype (distribution.gather_columns: a few large collectives, not one
  per table); a dense table gradient is summed over the replicas.
  """
  gradients = state.gradients
  slices = [g for g in gradients if isinstance(g, tf.IndexedSlices)]
  dense = iter(distribution.global_sum(
      [g for g in gradients if not isinstance(g, tf.IndexedSlices)]))
  field_ids = distribution.gather_columns(list(state.field_ids))
  weights = [] if state.weights is None else [state.weights]
  values = iter(distribution.gather_columns([g.values for g in slices] +
                                            weights))
  gradients = tuple(
      tf.IndexedSlices(next(values), field_ids[table.field], g.dense_shape)
      if isinstance(g, tf.IndexedSlices) else next(dense)
      for g, table in zip(gradients, state.tables))
  return state._replace(field_ids=tuple(field_ids), gradients=gradients,
                        weights=next(values) if weights else None)


def batch_rows(state: TableRows) -> TableRows:
  """Each table's gradient as one row per distinct id of its field (ids
  deduplicated once per field), with the table's rows of those ids; a
  dense data gradient is kept whole for the dense update."""
  distinct = tuple(cowclip.distinct_ids(ids, state.weights)
                   for ids in state.field_ids)
  rows = tuple(cowclip.gradient_rows(g, table.variable,
                                     distinct[table.field])
               for g, table in zip(state.gradients, state.tables))
  dense_data = tuple(None if isinstance(g, tf.IndexedSlices) else g
                     for g in state.gradients)
  return state._replace(gradients=None, distinct=distinct, rows=rows,
                        dense_data=dense_data)


def add_l2(l2: float, dense: bool) -> Transform:
  """The L2 term l2 * sum(W^2): 2 * l2 * W_k added to the batch's rows
  (cowclip.add_l2), and each table's sum(W^2), over the whole table with
  the `dense` update (the reference's L2: table_gradients gives the other
  rows theirs), else over the batch's rows."""

  def transform(state: TableRows) -> TableRows:
    squares = tuple(
        tf.reduce_sum(tf.square(tf.convert_to_tensor(table.variable)
                                if dense else row.weights))
        for table, row in zip(state.tables, state.rows))
    return state._replace(rows=tuple(cowclip.add_l2(row, l2)
                                     for row in state.rows),
                          squared_norms=squares)

  return transform


def clip_deep_rows(settings: cowclip.ClipSettings) -> Transform:
  """CowClip on the deep tables' rows (cowclip.clip_gradient_rows, with
  the field's counts, importance-weighted when the batch has weights)."""

  def transform(state: TableRows) -> TableRows:
    rows, clipped, batch_ids = [], list(state.clipped), list(state.batch_ids)
    for table, row in zip(state.tables, state.rows):
      if table.deep:
        result = cowclip.clip_gradient_rows(row, state.distinct[table.field],
                                            settings)
        row = row._replace(rows=result.gradient)
        clipped.append(result.clipped)
        batch_ids.append(result.batch_ids)
      rows.append(row)
    return state._replace(rows=tuple(rows), clipped=tuple(clipped),
                          batch_ids=tuple(batch_ids))

  return transform


def table_gradients(l2: float, dense: bool
                   ) -> Callable[[TableRows], List[Gradient]]:
  """The chain's end: what the optimizer applies to each table
  (cowclip.sparse_gradient: the batch's rows; with the `dense` update,
  cowclip.dense_gradient: the whole table, every row outside the batch
  with its 2 * l2 * W)."""

  def gradients(state: TableRows) -> List[Gradient]:
    return [cowclip.dense_gradient(row.rows, state.distinct[table.field],
                                   table.variable, l2, data)
            if dense else
            cowclip.sparse_gradient(row.rows, state.distinct[table.field],
                                    table.variable)
            for table, row, data in zip(state.tables, state.rows,
                                        state.dense_data)]

  return gradients


def table_chain(l2: float, dense: bool,
                clip: Optional[cowclip.ClipSettings]) -> Transform:
  """The step's chain for its options: gather, rows, L2, CowClip (when
  `clip` is given)."""
  return chain(gather_replicas, batch_rows, add_l2(l2, dense),
               *([clip_deep_rows(clip)] if clip is not None else []))


def start(tables: Sequence[Table], field_ids: Sequence[tf.Tensor],
          gradients: Sequence[Gradient],
          weights: Optional[tf.Tensor] = None) -> TableRows:
  """The chain's input: the tables, this replica's ids of every field,
  the tape's table gradients and the examples' importance weights."""
  return TableRows(tuple(tables), tuple(field_ids), weights,
                   gradients=tuple(gradients))
