#!/usr/bin/env bash
# Issue 24's device work in one call of at most 8 minutes (README.md beside this file):
#   run(command="bash bench/gpu/run.sh", carry=[".whl"], timeout_s=540)
# install the carried wheels -> versions -> LL302 timing (first, alone on the GPU) -> pytest -m gpu ->
# check --probe --report on the PyTorch/JAX fixture pairs -> probe of each fixture (figures) -> summary,
# packed into at most 6 files under $OUT. Each phase has its own time limit, all of them together
# BUDGET_S; a phase that fails or times out is recorded (phases.tsv) and the next one runs.
#
# Environment (all optional): OUT (default /tmp/lintloop-gpu/out, for a rehearsal), PHASES (a subset of
# "ll302 pytest check probe" for a re-run; install and versions always run), JOBS (parallel programs),
# BUDGET_S (480), SITE (/tmp/site), PROBE_STEPS (100, check's default), PROBE_TIMEOUT (60 per program).
set -u

cd "$(dirname "$0")/../.." || exit 1
REPO=$PWD
HERE=bench/gpu
OUT=${OUT:-/tmp/lintloop-gpu/out}
SITE=${SITE:-/tmp/site}
PHASES=${PHASES:-ll302 pytest check probe}
BUDGET_S=${BUDGET_S:-480}
RESERVE_S=40  # kept back from the phases for the summary and the packing
CPUS=$(nproc)
JOBS=${JOBS:-$(( CPUS / 2 > 8 ? 8 : (CPUS / 2 < 1 ? 1 : CPUS / 2) ))}  # one GPU: more buys little
WORK=$(mktemp -d "${TMPDIR:-/tmp}/lintloop-gpu-work.XXXXXX")
DEADLINE=$(( $(date +%s) + BUDGET_S ))
mkdir -p "$OUT" "$WORK/logs"
LOG=$OUT/run.log  # under $OUT from the start: it comes back even if the call is cut off
: >"$LOG"
# JAX takes 75% of the GPU per process by default: the parallel programs would starve each other.
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export WORK HERE PROBE_STEPS=${PROBE_STEPS:-100} PROBE_TIMEOUT=${PROBE_TIMEOUT:-60}

log() { printf '[%s +%3ds] %s\n' "$(date +%T)" "$SECONDS" "$*" | tee -a "$LOG"; }

# phase NAME CAP_S COMMAND: COMMAND (a shell line) under `timeout`, limited to CAP_S and to what the
# budget has left; its output to the console and logs/NAME.log; rc into PHASE_RC and phases.tsv.
phase() {
  local name=$1 cap=$2 command=$3 left limit start
  left=$(( DEADLINE - RESERVE_S - $(date +%s) ))
  limit=$(( cap < left ? cap : left ))
  if (( limit < 10 )); then
    log "$name: skipped, ${left}s of the budget left"
    printf '%s\tskipped (budget)\t0\t%s\n' "$name" "$limit" >>"$WORK/phases.tsv"
    PHASE_RC=skipped
    return
  fi
  log "$name: start (limit ${limit}s)"
  start=$(date +%s)
  timeout -k 10 "$limit" bash -c "$command" 2>&1 | tee "$WORK/logs/$name.log"
  PHASE_RC=${PIPESTATUS[0]}
  (( PHASE_RC == 124 || PHASE_RC == 137 )) && PHASE_RC="$PHASE_RC (timed out)"
  printf '%s\t%s\t%s\t%s\n' "$name" "$PHASE_RC" "$(( $(date +%s) - start ))" "$limit" >>"$WORK/phases.tsv"
  log "$name: rc=$PHASE_RC after $(( $(date +%s) - start ))s"
}

wanted() { [[ " $PHASES " == *" $1 "* ]]; }

# One pair under `check --probe`: the bad program and its fixed copy run, a report page per probed file.
check_pair() {
  python3 -P -m lintloop check --probe --device cuda --probe-steps "$PROBE_STEPS" --probe-timeout "$PROBE_TIMEOUT" \
    --jobs 1 --no-cache --exit-zero --format json --output "$WORK/check/$1.json" --report "$WORK/reports" \
    "tests/fixtures/$1_bad.py" "tests/fixtures/$1_good.py" >"$WORK/check/$1.log" 2>&1
  echo "[$(date +%T)] check $1: rc=$?"
}

# One fixture under `lintloop probe`: every event, for the figures the check JSON leaves out.
probe_one() {
  python3 -P -m lintloop probe "tests/fixtures/$1.py" --device cuda --steps "$PROBE_STEPS" \
    --timeout "$PROBE_TIMEOUT" --format json --output "$WORK/probe/$1.json" >"$WORK/probe/$1.log" 2>&1
  echo "[$(date +%T)] probe $1: rc=$?"
}
export -f check_pair probe_one

log "work folder $WORK, out $OUT, $CPUS CPUs, $JOBS jobs, budget ${BUDGET_S}s, phases: $PHASES"

# `-P` (no current directory on sys.path) below: lintloop is the one PYTHONPATH names, not ./lintloop.
phase install 60 "rm -rf '$SITE' && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --upgrade --target '$SITE' .whl/*.whl"
carried=$(cat .whl/lintloop.fingerprint 2>/dev/null || echo none)
current=$(bash "$HERE/fingerprint.sh")
if [[ $PHASE_RC == 0 && $carried == "$current" ]]; then
  MODE=wheel; export PYTHONPATH=$SITE
elif [[ $PHASE_RC == 0 ]]; then
  # The wheel was built from other sources than the ones that travelled: test what travelled.
  MODE=checkout; export PYTHONPATH=$REPO:$SITE
  log "WARNING: .whl/lintloop.fingerprint $carried != checkout $current: using the checkout's lintloop"
else
  MODE=checkout-without-wheels; export PYTHONPATH=$REPO  # the interpreter's own packages must do
  log "WARNING: the wheels did not install: the checkout's lintloop with the interpreter's packages"
fi
log "lintloop: $MODE (PYTHONPATH=$PYTHONPATH)"

phase versions 60 "nvidia-smi >'$WORK/nvidia-smi.txt' 2>&1; python3 -P -m lintloop --version; \
  python3 '$HERE/env_report.py' --wheels .whl --mode '$MODE' --fingerprint 'wheel=$carried' \
  --fingerprint 'checkout=$current' --output '$WORK/versions.json' && \
  python3 '$HERE/fixture_pairs.py' >'$WORK/pairs.txt' && cat '$WORK/pairs.txt'"

wanted ll302 && phase ll302 90 "python3 '$HERE/ll302_timing.py' --output '$WORK/ll302.json'"

xdist=""; (( JOBS > 1 )) && xdist="-n $JOBS"
wanted pytest && phase pytest 180 "python3 -P -m pytest -q -p no:randomly -m gpu tests/test_probe_gpu.py $xdist \
  -rfEs --junitxml '$WORK/pytest.junit.xml'"

mkdir -p "$WORK/check" "$WORK/probe" "$WORK/reports"
wanted check && phase check 150 "cut -d' ' -f1 '$WORK/pairs.txt' | xargs -P $JOBS -I{} bash -c 'check_pair {}'"

wanted probe && phase probe 150 "while read -r stem _; do echo \${stem}_bad; echo \${stem}_good; done \
  <'$WORK/pairs.txt' | xargs -P $JOBS -I{} bash -c 'probe_one {}'"

# The summary: with the CPU's figures beside the device's where a baseline travelled.
baseline=()
[[ -f $HERE/cpu_baseline.json ]] && baseline=(--baseline "$HERE/cpu_baseline.json")
log "summary"
if ! timeout 30 python3 "$HERE/summarize.py" --work "$WORK" --out "$OUT" "${baseline[@]}" \
    >"$WORK/logs/summarize.log" 2>&1; then
  { echo "# summarize.py failed"; echo; echo '```'; tail -30 "$WORK/logs/summarize.log"; echo '```'
    echo; echo "phases (name, rc, seconds, limit):"; echo '```'; cat "$WORK/phases.tsv"; echo '```'
  } >"$OUT/summary.md"
  log "summarize.py failed: a short summary.md instead"
fi

# Packing: $OUT/{run.log, summary.md, results.json, pytest.log, raw.tar.gz, reports.tar.gz}.
cp "$WORK/logs/pytest.log" "$OUT/pytest.log" 2>/dev/null
tar -czf "$OUT/raw.tar.gz" -C "$WORK" --exclude=./reports .
tar -czf "$OUT/reports.tar.gz" -C "$WORK" reports
log "done in ${SECONDS}s; work folder $WORK; out:"
ls -l "$OUT" | tee -a "$LOG"
cat "$WORK/logs/summarize.log"  # its digest, last: what the device reply's output tail keeps
