#!/usr/bin/env bash
# The default batch size against batch 1024, in one sitting (issue #58,
# docs/defaults.md "The default batch size"): the default `run` (batch
# `auto`) and the same run at `--batch-size 1024`, on generated Criteo rows
# at each size given, one after the other on one pipeline directory (the
# second reuses ExampleGen, StatisticsGen and Transform from TFX's cache),
# neither warm-started.
#
#   docs/defaults_pair.sh ROOT [ROWS...]     (default ROWS: 10000000 2000000)
#
# ROOT gets the data, each pair's pipeline DIR and a log per run
# (ROOT/N/{auto,1024}.log, each with GNU time's wall clock and peak memory);
# `python -m pipeline report ROOT/N/out` gives the metrics of the newest run.
set -euo pipefail
trap 'exit 130' INT
trap 'exit 143' TERM
ROOT=${1:?usage: docs/defaults_pair.sh ROOT [ROWS...]}
shift
PY=${PY:-.venv/bin/python}
for n in ${@:-10000000 2000000}; do
  dir=$ROOT/$n
  mkdir -p "$dir/data"
  [ -f "$dir/data/train.txt" ] || $PY -m pipeline generate --format criteo \
      --rows "$n" --seed 1 --out "$dir/data/train.txt"
  for batch in auto 1024; do
    [ -f "$dir/$batch.done" ] && continue
    /usr/bin/time -v $PY -m pipeline run --dataset criteo \
      --data "$dir/data/train.txt" --output "$dir/out" --no-warm-start \
      --batch-size "$batch" > "$dir/$batch.log" 2>&1
    $PY -m pipeline report "$dir/out" > "$dir/$batch.report" 2>&1
    touch "$dir/$batch.done"
  done
done
