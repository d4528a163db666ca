#!/usr/bin/env bash
# The paper-regime batch-size study (docs/study.md, "Paper regime"): every
# command it runs, in order. Each `study` skips the runs already in its DIR's
# study.csv and TFX reuses its Transform, so re-running this script resumes
# where it stopped.
#
#   docs/study_paper_regime.sh ROOT      (run from the repository root)
#
# ROOT gets data/ (the generated files) and one study DIR per study.
set -euo pipefail
ROOT=${1:?usage: docs/study_paper_regime.sh ROOT}
PY=${PY:-.venv/bin/python}
ROWS=10000000

generate() {  # FORMAT OUT [generate flags...]
  local format=$1 out=$2
  shift 2
  [ -f "$out" ] || $PY -m pipeline generate --format "$format" --rows $ROWS \
    --seed 1 --out "$out" "$@"
}

# Id-frequency slice thresholds near the eval split's tertiles at 10M rows
# (the typical training count of an example's ids, estimated from the
# generator's closed-form counts).
declare -A THRESHOLDS=([criteo]=7000,25000 [avazu]=250000,450000)

study() {  # DATASET DATA DIR [study flags...]
  local dataset=$1 data=$2 dir=$3
  shift 3
  $PY -m pipeline study --dataset "$dataset" --data "$data" --output "$dir" \
    --seeds 1 --epochs 10 --frequency-thresholds "${THRESHOLDS[$dataset]}" \
    "$@"
}

auc_of() {  # DIR RUN: the run's eval AUC in DIR/study.csv
  $PY - "$1/study.csv" "$2" <<'EOF'
import csv, sys
rows = {r["run"]: r for r in csv.DictReader(open(sys.argv[1]))}
print(rows[sys.argv[2]]["auc"])
EOF
}

CRITEO=$ROOT/data/criteo_kaggle/train.txt
CRITEO_TOP3=$ROOT/data/criteo_kaggle_top3/train.txt
AVAZU=$ROOT/data/avazu/train
generate criteo "$CRITEO" --id-profile kaggle
generate criteo "$CRITEO_TOP3" --id-profile kaggle --top-ids 3

# 1. Base hyperparameters good at 1024 for this size: the paper's (Table 9)
#    against the `auto` ones, on the no-scaling run at the base batch.
PAPER_HPARAMS=(--dense-lr 8e-4 --embed-lr 1e-4 --l2 1e-5)
study criteo "$CRITEO" "$ROOT/criteo_paper_hparams" --rules none \
  --batch-sizes 1024 "${PAPER_HPARAMS[@]}"
study criteo "$CRITEO" "$ROOT/criteo_auto_hparams" --rules none \
  --batch-sizes 1024
BASE_RUN=deepfm-none-noclip-b1024-s1
if $PY -c "import sys; sys.exit(not float(sys.argv[1]) > float(sys.argv[2]))" \
    "$(auc_of "$ROOT/criteo_paper_hparams" $BASE_RUN)" \
    "$(auc_of "$ROOT/criteo_auto_hparams" $BASE_RUN)"; then
  MAIN=$ROOT/criteo_paper_hparams
  HPARAMS=("${PAPER_HPARAMS[@]}")
else
  MAIN=$ROOT/criteo_auto_hparams
  HPARAMS=()
fi
echo "paper regime: base hyperparameters of $MAIN"

# 2. The headline: CowClip at 32x against 1024, the old rules and the
#    ablation at 32x; then 8x.
study criteo "$CRITEO" "$MAIN" --rules cowclip,none,sqrt --ablation \
  --batch-sizes 1024,32768 "${HPARAMS[@]+"${HPARAMS[@]}"}"
study criteo "$CRITEO" "$MAIN" --rules cowclip,none,sqrt --ablation \
  --batch-sizes 8192 "${HPARAMS[@]+"${HPARAMS[@]}"}"

# 3. The Table 1 diagnostic at this size: the old rules on the top-3 data.
study criteo "$CRITEO_TOP3" "$ROOT/criteo_top3" --rules none,sqrt \
  --batch-sizes 1024,8192 "${HPARAMS[@]+"${HPARAMS[@]}"}"

# 4. Avazu at 1024 and 32768 (its published base: dense_lr 1e-4, zeta 1e-4).
generate avazu "$AVAZU"
study avazu "$AVAZU" "$ROOT/avazu" --rules cowclip,none,sqrt \
  --batch-sizes 1024,32768
