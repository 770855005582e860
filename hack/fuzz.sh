#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets/*.rs) with cargo-fuzz on nightly for a while each
# and prints a table: target, runs, seconds, crashes. Exits non-zero if any target crashed.
#
#   hack/fuzz.sh SECONDS [--install | --smoke]
#
# --install (make fuzz): installs cargo-fuzz into target/tools when it is missing; a missing
#   nightly toolchain is an error.
# --smoke (make test): never installs; without nightly or cargo-fuzz it says so and exits 0
#   (the stable replay of the corpus, tests/fuzz_corpus.rs, has run in test-unit), and it
#   gives the nightly build at most FUZZ_BUILD_SECONDS (default 150) so the step stays short.
#
# libFuzzer writes the new inputs it finds to target/fuzz/corpus/<target>/ and reads the
# committed seeds from fuzz/corpus/<target>/ without changing them; crashes go to
# fuzz/artifacts/<target>/. Turn a crash into a regression: minimise it
# (`cargo +nightly fuzz tmin <target> <artifact>`), fix the bug, and commit the input to
# fuzz/corpus/<target>/ so tests/fuzz_corpus.rs replays it.
set -euo pipefail

seconds=${1:?usage: hack/fuzz.sh SECONDS [--install | --smoke]}
mode=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

skip() {
  echo "fuzz: $1"
  exit 0
}

if ! cargo +nightly --version >/dev/null 2>&1; then
  [ "$mode" = --smoke ] && skip "no nightly toolchain, replayed corpus only (make fuzz needs rustup's nightly)"
  echo "fuzz: make fuzz needs a nightly toolchain (rustup toolchain install nightly)" >&2
  exit 1
fi

export PATH="$root/target/tools/bin:$PATH"
if ! cargo fuzz --version >/dev/null 2>&1; then
  [ "$mode" = --install ] || skip "cargo-fuzz not installed, replayed corpus only (make fuzz installs it)"
  echo "fuzz: installing cargo-fuzz into target/tools (cargo install cargo-fuzz --locked --root target/tools)"
  cargo install cargo-fuzz --locked --root target/tools
fi

targets=$(cd fuzz/fuzz_targets && ls -- *.rs | sed 's/\.rs$//')

build=(cargo +nightly fuzz build)
if [ "$mode" = --smoke ]; then
  budget=${FUZZ_BUILD_SECONDS:-150}
  if ! timeout "$budget" "${build[@]}" >target/fuzz-build.log 2>&1; then
    tail -5 target/fuzz-build.log
    skip "the nightly fuzz build did not finish in ${budget} s, replayed corpus only (make fuzz builds it; its work is kept)"
  fi
else
  "${build[@]}"
fi

rows=()
failed=0
for target in $targets; do
  work=target/fuzz/corpus/$target
  artifacts=fuzz/artifacts/$target
  mkdir -p "$work" "$artifacts"
  log=target/fuzz/$target.log
  before=$(ls "$artifacts" | wc -l)
  start=$(date +%s)
  rc=0
  cargo +nightly fuzz run "$target" "$work" "fuzz/corpus/$target" -- \
    -max_total_time="$seconds" -timeout=10 -print_final_stats=1 >"$log" 2>&1 || rc=$?
  elapsed=$(($(date +%s) - start))
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  crashes=$(($(ls "$artifacts" | wc -l) - before))
  if [ "$rc" != 0 ] && [ "$crashes" = 0 ]; then
    crashes=1 # a failure that left no artifact (the build, or libFuzzer itself): see the log
  fi
  if [ "$crashes" != 0 ]; then
    failed=1
    echo "fuzz: $target crashed; $log says:"
    grep -E 'panicked|ERROR|SUMMARY|Test unit written' "$log" | head -10 || tail -20 "$log"
  fi
  rows+=("$(printf '%-18s %12s %8s %8s' "$target" "${runs:-?}" "$elapsed" "$crashes")")
done

echo
printf '%-18s %12s %8s %8s\n' target runs seconds crashes
printf '%s\n' "${rows[@]}"
exit $failed
