#!/usr/bin/env bash
# abbench.sh - A/B compare the franz-go produce hot path benchmarks.
#
# Usage: abbench.sh <treeA> <treeB> [count]
#
# Both trees must be franz-go module roots containing
# pkg/kgo/produce_bench_test.go. The script builds each tree's kgo test
# binary once (go test -c, GOWORK=off, inside that tree), then runs the two
# binaries alternately (A, B, A, B, ...) count times (default 10), one
# -test.count=1 run each time, appending to a.txt and b.txt, and finally
# prints "benchstat a.txt b.txt". Alternating spreads machine noise (other
# jobs, thermal drift) over both sides instead of biasing one.
#
# Environment:
#   BENCH_ENV_A  space separated VAR=val assignments added to the
#                environment of every run of A, e.g. "KGO_BENCH_FOO=1".
#   BENCH_ENV_B  the same for B. Values cannot contain spaces.
#   BENCH        benchmark regexp (default 'BenchmarkBufferRecord$|BenchmarkProduce$').
#   BENCHTIME    passed as -test.benchtime if set (e.g. 2s or 1000000x).
#   OUT          directory for a.test, b.test, a.txt, b.txt (default: a new
#                temp dir). a.txt and b.txt are truncated at start.
#   BENCHSTAT    path to a benchstat binary. Otherwise benchstat from PATH,
#                else golang.org/x/perf/cmd/benchstat@$BENCHSTAT_VERSION is
#                installed into $OUT/bin with "go install".
#   BENCHSTAT_VERSION  default v0.0.0-20260908200009-22c9c6c9d4da.
#
# Example, option off vs on in the same patched tree:
#   BENCH_ENV_B="KGO_BENCH_FAIL_STOP=1" ./abbench.sh patched patched 10

set -euo pipefail

usage() {
	echo "usage: $0 <treeA> <treeB> [count]" >&2
	exit 2
}

[[ $# -ge 2 && $# -le 3 ]] || usage
count=${3:-10}
[[ $count =~ ^[1-9][0-9]*$ ]] || { echo "count must be a positive integer, got '$count'" >&2; exit 2; }

bench=${BENCH:-'BenchmarkBufferRecord$|BenchmarkProduce$'}
benchstat_version=${BENCHSTAT_VERSION:-v0.0.0-20260908200009-22c9c6c9d4da}

tree_a=$(cd "$1" && pwd)
tree_b=$(cd "$2" && pwd)
for t in "$tree_a" "$tree_b"; do
	if [[ ! -f $t/pkg/kgo/produce_bench_test.go ]]; then
		echo "$t: no pkg/kgo/produce_bench_test.go; is this a franz-go tree with the benchmark?" >&2
		exit 1
	fi
done

out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/abbench.XXXXXX")}
mkdir -p "$out"
out=$(cd "$out" && pwd)

read -r -a env_a <<<"${BENCH_ENV_A:-}"
read -r -a env_b <<<"${BENCH_ENV_B:-}"
for kv in "${env_a[@]}" "${env_b[@]}"; do
	[[ $kv == [A-Za-z_]*=* ]] || { echo "BENCH_ENV_A/B: '$kv' is not VAR=val" >&2; exit 2; }
done

describe() {
	git -C "$1" describe --always --dirty 2>/dev/null || echo "not a git tree"
}

echo "A: $tree_a ($(describe "$tree_a")) env: ${BENCH_ENV_A:-none}"
echo "B: $tree_b ($(describe "$tree_b")) env: ${BENCH_ENV_B:-none}"
echo "results in $out"

if [[ -n ${BENCHSTAT:-} ]]; then
	benchstat=$BENCHSTAT
elif command -v benchstat >/dev/null; then
	benchstat=$(command -v benchstat)
else
	echo "installing benchstat@$benchstat_version into $out/bin"
	# Run from $out so that no go.mod or go.work around the caller applies.
	(cd "$out" && GOWORK=off GOBIN="$out/bin" go install "golang.org/x/perf/cmd/benchstat@$benchstat_version")
	benchstat=$out/bin/benchstat
fi

# Build both binaries before running either, so a build never overlaps a run.
for side in a b; do
	if [[ $side == a ]]; then t=$tree_a; else t=$tree_b; fi
	echo "building $side.test from $t/pkg/kgo"
	(cd "$t/pkg/kgo" && GOWORK=off go test -c -o "$out/$side.test" .)
done

: >"$out/a.txt"
: >"$out/b.txt"

# run SIDE: runs one side's binary once, from its package directory as go
# test would, and appends its results.
run() {
	local side=$1 t
	local -a envs
	if [[ $side == a ]]; then
		t=$tree_a
		envs=("${env_a[@]}")
	else
		t=$tree_b
		envs=("${env_b[@]}")
	fi
	local -a args=(-test.run '^$' -test.bench "$bench" -test.benchmem -test.count 1)
	if [[ -n ${BENCHTIME:-} ]]; then
		args+=(-test.benchtime "$BENCHTIME")
	fi
	(cd "$t/pkg/kgo" && env "${envs[@]}" "$out/$side.test" "${args[@]}") >>"$out/$side.txt"
}

for ((i = 1; i <= count; i++)); do
	echo "round $i/$count"
	run a
	run b
done

echo
cd "$out"
"$benchstat" a.txt b.txt
