#!/usr/bin/env bash
# tests/bench/bench.sh: `make bench`. The same benchmark source compiled three ways (one
# of them twice) and run alternately, then benchstat tables:
#
#   pristine  franz-go v1.22.3 from the module proxy (upstream/patchset.sh
#             pristine), plus the first patch of the series, which only adds
#             kgo's hot path benchmark files (checked: every file it touches
#             is a _test.go file), and this module built with -tags pristine
#             against that tree;
#   A/A       the same pristine source built a second time into a binary of
#             its own and run as a side of its own: pristine against A/A is
#             the noise floor, printed beside off and on, and summarized
#             after the tables (largest difference of medians, widest
#             confidence interval);
#   off       the patched tree (upstream/franz-go, the repository's go.work),
#             FailPartitionOnProduceFailure off;
#   on        the same patched binaries with the option on: in kgo's hot
#             path benchmarks, their opts=FailPartitionOnProduceFailure
#             sub-benchmarks (a row of benchProduceConfigs in
#             pkg/kgo/produce_bench_test.go; the other sides run
#             opts=default, and a tree without that row has no kgo on
#             side); in tests/bench/e2e, KGO_BENCH_FAIL_STOP=1.
#
# Groups (BENCH_GROUPS, default all four, in this order in every round):
#
#   kgo       pkg/kgo BenchmarkBufferRecord and BenchmarkProduce (no broker),
#             pristine, A/A, off, on, BENCH_KGO_RUNS times per round. These
#             micro-benchmarks run as quietly as a process can make them:
#             -test.cpu BENCH_CPU (and GOMAXPROCS to match), GOGC=off with a
#             GOMEMLIMIT (no GC cycle runs: they allocate nothing per op),
#             a fixed op count.
#   e2e       tests/bench/e2e BenchmarkProduce: keyed records to an in-process
#             kfake, partitions=8/1024 x codec=none/lz4/zstd, pristine, A/A,
#             off, on.
#   failstop  on only: pkg/kgo BenchmarkProduceRejected, tests/bench/e2e
#             BenchmarkRejected and BenchmarkRecovery.
#   korder    patched only: pkg/korder BenchmarkProduce, impl=kgo,
#             impl=kgo+closure and impl=korder, failures=0%/1%. Each impl
#             runs in a process of its own, in an order that rotates from
#             round to round: run in one process, the first impl is measured
#             on a fresh heap and the others after it, which biased the
#             comparison by as much as the difference it measures.
#   isolation patched only: pkg/korder BenchmarkIsolationDefaultPartitioner
#             (-test.benchtime 1x, about 12 s a round): 16 partitions, keyed
#             records from 2 goroutines at full speed, kgo's default
#             partitioner, partition 0 failing for 2 s (fault=hold, invalid,
#             retryable); healthy-ratio is the other partitions' rate
#             during the fault over their rate before it.
#
# Every test binary is built once, before any run. Then each round runs every
# group once per side, one -test.count=1 run at a time, appending to one file
# per group and side in BENCH_OUT; alternating spreads machine noise over all
# sides instead of biasing one, and the side that goes first rotates from
# round to round. Finally benchstat (pinned, installed from the Go module
# proxy) prints one table per group, with the A/A column beside off and on.
#
# Environment:
#   BENCH_COUNT         rounds (default 10).
#   BENCH_GROUPS        which groups to run, space separated (default
#                       "kgo e2e failstop korder isolation").
#   BENCHTIME           -test.benchtime for every group, unless the group's
#                       own variable below is set; for a quick check,
#                       BENCH_COUNT=2 BENCHTIME=2000x.
#   BENCHTIME_KGO       kgo group, and pkg/kgo BenchmarkProduceRejected
#                       (default 1000000x).
#   BENCH_KGO_RUNS      runs of each kgo side per round (default 3: the
#                       group is cheap, and more samples narrow the
#                       confidence intervals).
#   BENCH_CPU           -test.cpu and GOMAXPROCS for the kgo micro-benchmarks
#                       (default 1).
#   BENCH_MICRO_GOGC, BENCH_MICRO_GOMEMLIMIT
#                       GOGC and GOMEMLIMIT for the kgo micro-benchmarks
#                       (default off and 1GiB).
#   BENCHTIME_E2E       e2e group, records per run (default 500000x).
#   BENCHTIME_REJECTED  tests/bench/e2e BenchmarkRejected (default 1s).
#   BENCHTIME_RECOVERY  tests/bench/e2e BenchmarkRecovery, failures per run
#                       (default 500x).
#   BENCHTIME_KORDER    korder group, records per run (default 1000000x: a
#                       run must see a handful of 1% failures).
#   BENCH_OUT           directory for the raw results (one file per group and
#                       side), machine.txt and tables.txt (default
#                       tests/bench/out/<UTC time>; tests/bench/out is gitignored and
#                       tests/bench/out/latest points at the last run). Re-print a
#                       table from it with tests/bench/out/bin/benchstat.
#   BENCHSTAT           a benchstat binary to use instead of installing
#                       golang.org/x/perf/cmd/benchstat@$BENCHSTAT_VERSION
#                       into tests/bench/out/bin.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tree=$root/upstream/franz-go
patches=$root/patches
benchstat_version=${BENCHSTAT_VERSION:-v0.0.0-20260908200009-22c9c6c9d4da}
on_env=KGO_BENCH_FAIL_STOP=1

die() { printf 'bench: %s\n' "$*" >&2; exit 1; }

count=${BENCH_COUNT:-10}
[[ $count =~ ^[1-9][0-9]*$ ]] || die "BENCH_COUNT must be a positive integer, got '$count'"
read -r -a groups <<<"${BENCH_GROUPS:-kgo e2e failstop korder isolation}"
[[ ${#groups[@]} -gt 0 ]] || die "BENCH_GROUPS is empty"
for g in "${groups[@]}"; do
	case $g in
	kgo | e2e | failstop | korder | isolation) ;;
	*) die "BENCH_GROUPS: unknown group '$g' (kgo, e2e, failstop, korder, isolation)" ;;
	esac
done
want() { [[ " ${groups[*]} " == *" $1 "* ]]; }

bt_kgo=${BENCHTIME_KGO:-${BENCHTIME:-1000000x}}
kgo_runs=${BENCH_KGO_RUNS:-3}
[[ $kgo_runs =~ ^[1-9][0-9]*$ ]] || die "BENCH_KGO_RUNS must be a positive integer, got '$kgo_runs'"
cpu=${BENCH_CPU:-1}
[[ $cpu =~ ^[1-9][0-9]*$ ]] || die "BENCH_CPU must be a positive integer, got '$cpu'"
# The environment and flags of every kgo micro-benchmark run.
micro_env=(GOMAXPROCS="$cpu" GOGC="${BENCH_MICRO_GOGC:-off}" GOMEMLIMIT="${BENCH_MICRO_GOMEMLIMIT:-1GiB}")
micro_flags="-test.cpu $cpu"
bt_e2e=${BENCHTIME_E2E:-${BENCHTIME:-500000x}}
bt_rejected=${BENCHTIME_REJECTED:-${BENCHTIME:-1s}}
bt_recovery=${BENCHTIME_RECOVERY:-${BENCHTIME:-500x}}
bt_korder=${BENCHTIME_KORDER:-${BENCHTIME:-1000000x}}

[[ -d $tree/.git ]] || die "upstream/franz-go is not materialized; run: make patches-apply"

stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=${BENCH_OUT:-$root/tests/bench/out/$stamp}
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [[ -z ${BENCH_OUT:-} ]]; then
	ln -sfn "$stamp" "$root/tests/bench/out/latest"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/bench.XXXXXX")
# shellcheck disable=SC2064
trap "chmod -R u+w '$work' 2>/dev/null; rm -rf '$work'" EXIT

start=$(date +%s)
elapsed() {
	local s=$(($(date +%s) - start))
	printf '%dm%02ds' $((s / 60)) $((s % 60))
}

# The header: what ran, where, how. Kept as machine.txt next to the results.
{
	echo "make bench ($(date -u '+%Y-%m-%d %H:%M:%S UTC'))"
	printf 'command: BENCH_COUNT=%s BENCH_GROUPS="%s" BENCHTIME_KGO=%s BENCH_KGO_RUNS=%s BENCHTIME_E2E=%s BENCHTIME_REJECTED=%s BENCHTIME_RECOVERY=%s BENCHTIME_KORDER=%s bash tests/bench/bench.sh\n' \
		"$count" "${groups[*]}" "$bt_kgo" "$kgo_runs" "$bt_e2e" "$bt_rejected" "$bt_recovery" "$bt_korder"
	echo "kgo micro-benchmarks: ${micro_env[*]} $micro_flags"
	echo "machine: $(nproc) CPUs, $(grep -m1 '^model name' /proc/cpuinfo | sed 's/^[^:]*: *//'), $(awk '/^MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), $(uname -srm)"
	echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "go: $(go version)"
	echo "repository: $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
	echo "patched tree: upstream/franz-go $(git -C "$tree" describe --always --dirty), $(git -C "$tree" rev-list --count upstream-base..HEAD) commits on upstream-base"
	echo "results: $out"
} | tee "$out/machine.txt"
if [[ -n $(git -C "$tree" status --porcelain) ]]; then
	echo "bench: warning: upstream/franz-go has uncommitted edits; the patched side is not the exported series" | tee -a "$out/machine.txt"
fi
echo

# benchstat, pinned, from the module proxy.
if [[ -n ${BENCHSTAT:-} ]]; then
	benchstat=$BENCHSTAT
else
	benchstat=$root/tests/bench/out/bin/benchstat
	if [[ ! -x $benchstat ]] || ! go version -m "$benchstat" 2>/dev/null | grep -q "golang.org/x/perf[[:space:]]*$benchstat_version"; then
		echo "installing benchstat@$benchstat_version into tests/bench/out/bin"
		# From $work, so that no go.mod or go.work applies.
		(cd "$work" && GOWORK=off GOFLAGS="" GOBIN="$root/tests/bench/out/bin" go install "golang.org/x/perf/cmd/benchstat@$benchstat_version")
	fi
fi

# The pristine side: v1.22.3 from the module proxy, and the benchmark patch,
# which must add nothing but test files.
if want kgo || want e2e; then
	bash "$root/upstream/patchset.sh" pristine "$work/pristine"
	pristine=$work/pristine/franz-go
	first=$(grep -v -E '^[[:space:]]*(#|$)' "$patches/series" | head -1)
	touched=$(git -C "$pristine" apply --numstat "$patches/$first" | cut -f3)
	if grep -v '_test\.go$' <<<"$touched" | grep -q .; then
		die "the first patch, $first, touches non-test files; the pristine side would not be pristine:
$(grep -v '_test\.go$' <<<"$touched")"
	fi
	git -C "$pristine" apply "$patches/$first"
	echo "pristine tree: v1.22.3 + $first ($(tr '\n' ' ' <<<"$touched"))"
	# A later patch may have to adapt the benchmark to an internal change
	# (a field added to promisedRec, say): say so, with the diff, in the
	# header that is kept with the results.
	if ! diff -u --label pristine/pkg/kgo/produce_bench_test.go --label patched/pkg/kgo/produce_bench_test.go \
		"$pristine/pkg/kgo/produce_bench_test.go" "$tree/pkg/kgo/produce_bench_test.go" >"$work/bench.diff"; then
		{
			echo "note: later patches changed pkg/kgo/produce_bench_test.go; the two sides run:"
			cat "$work/bench.diff"
		} | tee -a "$out/machine.txt"
	fi
	got=$(cd "$root" && GOWORK=$work/pristine/go.work go list -m -f '{{.Dir}}' github.com/twmb/franz-go)
	[[ $got == "$pristine" ]] || die "the pristine go.work resolves github.com/twmb/franz-go to $got, not $pristine"
fi

# Build every binary before running any. They live in $work, which is
# removed at exit (about 17 MB each).
bin=$work/bin
build() { # NAME DIR GOWORK ARGS...
	local name=$1 dir=$2 gowork=$3
	shift 3
	echo "building $name"
	(cd "$dir" && GOWORK=$gowork go test -c -o "$bin/$name.test" "$@")
}
if want kgo || want failstop; then
	build kgo-patched "$tree/pkg/kgo" off .
fi
if want kgo; then
	build kgo-pristine "$pristine/pkg/kgo" off .
	build kgo-aa "$pristine/pkg/kgo" off . # A/A: the same build again
fi
if want e2e || want failstop; then
	build e2e-patched "$root" "$root/go.work" ./tests/bench/e2e
fi
if want e2e; then
	build e2e-pristine "$root" "$work/pristine/go.work" -tags pristine ./tests/bench/e2e
	build e2e-aa "$root" "$work/pristine/go.work" -tags pristine ./tests/bench/e2e
fi
if want korder || want isolation; then
	build korder "$root" "$root/go.work" ./pkg/korder
fi
echo

# run FILE DIR BINARY BENCH BENCHTIME FLAGS [VAR=val ...]: one run of a test
# binary, from its package directory as go test would, with FLAGS (split on
# spaces) added, KGO_BENCH_FAIL_STOP unset unless given, and the given
# environment, appending the results to FILE.
run() {
	local file=$1 dir=$2 binary=$3 bench=$4 benchtime=$5 flags
	read -r -a flags <<<"$6"
	shift 6
	if ! (cd "$dir" && env -u KGO_BENCH_FAIL_STOP "$@" "$bin/$binary.test" \
		-test.run '^$' -test.bench "$bench" -test.benchtime "$benchtime" \
		-test.benchmem -test.count 1 -test.timeout 30m "${flags[@]}") >>"$out/$file" 2>&1; then
		echo "bench: $binary.test -test.bench '$bench' ${*:-} failed; the end of $out/$file:" >&2
		tail -n 30 "$out/$file" >&2
		exit 1
	fi
}

kgo_off='^(BenchmarkBufferRecord|BenchmarkProduce)$/^opts=default$'
kgo_on='^(BenchmarkBufferRecord|BenchmarkProduce)$/^opts=FailPartitionOnProduceFailure$'
# Without the on row (a tree cut before the FailPartitionOnProduceFailure
# patch), the kgo group runs pristine, A/A and off only.
kgo_has_on=1
if want kgo && ! (cd "$tree/pkg/kgo" && "$bin/kgo-patched.test" -test.run '^$' -test.bench "$kgo_on" -test.benchtime 1x) | grep '^Benchmark' >/dev/null; then
	kgo_has_on=0
	echo "note: pkg/kgo's produce benchmarks have no opts=FailPartitionOnProduceFailure row; the kgo group has no on side" | tee -a "$out/machine.txt"
fi
for g in "${groups[@]}"; do
	case $g in
	kgo | e2e) for side in pristine aa off on; do : >"$out/$g-$side.txt"; done ;;
	*) : >"$out/$g.txt" ;;
	esac
done
# group NAME: runs one group's runs for one round, and adds NAME's time to
# the round's summary line.
round_times=
group() {
	local t0
	t0=$(date +%s)
	"run_$1"
	round_times+=" $1 $(($(date +%s) - t0))s"
}
# rotated N: 0..N-1 starting at the round's offset, so that the side that
# runs first (on a machine just freed, or just loaded, by the previous
# group) changes from round to round. i is the round, from 1.
rotated() {
	local n=$1 j
	for ((j = 0; j < n; j++)); do echo $(((i - 1 + j) % n)); done
}
kgo_side() { # 0..3: pristine, A/A, off, on
	case $1 in
	0) run kgo-pristine.txt "$pristine/pkg/kgo" kgo-pristine "$kgo_off" "$bt_kgo" "$micro_flags" "${micro_env[@]}" ;;
	1) run kgo-aa.txt "$pristine/pkg/kgo" kgo-aa "$kgo_off" "$bt_kgo" "$micro_flags" "${micro_env[@]}" ;;
	2) run kgo-off.txt "$tree/pkg/kgo" kgo-patched "$kgo_off" "$bt_kgo" "$micro_flags" "${micro_env[@]}" ;;
	3) if [[ $kgo_has_on == 1 ]]; then
		run kgo-on.txt "$tree/pkg/kgo" kgo-patched "$kgo_on" "$bt_kgo" "$micro_flags" "${micro_env[@]}"
	fi ;;
	esac
}
run_kgo() {
	local k s
	for ((k = 0; k < kgo_runs; k++)); do
		for s in $(rotated 4); do kgo_side "$s"; done
	done
}
e2e_side() { # 0..3: pristine, A/A, off, on
	case $1 in
	0) run e2e-pristine.txt "$root/tests/bench/e2e" e2e-pristine '^BenchmarkProduce$' "$bt_e2e" "" ;;
	1) run e2e-aa.txt "$root/tests/bench/e2e" e2e-aa '^BenchmarkProduce$' "$bt_e2e" "" ;;
	2) run e2e-off.txt "$root/tests/bench/e2e" e2e-patched '^BenchmarkProduce$' "$bt_e2e" "" ;;
	3) run e2e-on.txt "$root/tests/bench/e2e" e2e-patched '^BenchmarkProduce$' "$bt_e2e" "" "$on_env" ;;
	esac
}
run_e2e() {
	local s
	for s in $(rotated 4); do e2e_side "$s"; done
}
run_failstop() {
	run failstop.txt "$tree/pkg/kgo" kgo-patched '^BenchmarkProduceRejected$' "$bt_kgo" "$micro_flags" "${micro_env[@]}" "$on_env"
	run failstop.txt "$root/tests/bench/e2e" e2e-patched '^BenchmarkRejected$' "$bt_rejected" "" "$on_env"
	run failstop.txt "$root/tests/bench/e2e" e2e-patched '^BenchmarkRecovery$' "$bt_recovery" "" "$on_env"
}
korder_impls=(kgo 'kgo\+closure' korder) # -test.bench patterns
run_korder() {
	local n=${#korder_impls[@]} j
	for ((j = 0; j < n; j++)); do
		# i is the round, from 1; round 1 runs kgo first, which makes it
		# benchstat's base column.
		run korder.txt "$root/pkg/korder" korder "^BenchmarkProduce\$/^failures=/^impl=${korder_impls[(i - 1 + j) % n]}\$" "$bt_korder" ""
	done
}
run_isolation() {
	run isolation.txt "$root/pkg/korder" korder '^BenchmarkIsolationDefaultPartitioner$' 1x ""
}
for ((i = 1; i <= count; i++)); do
	round_times=
	for g in "${groups[@]}"; do
		group "$g"
	done
	echo "round $i/$count:$round_times ($(elapsed) elapsed, load $(cut -d' ' -f1 /proc/loadavg))"
done
echo "runs done in $(elapsed); load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/machine.txt"
echo

# aa_floor FILE-PREFIX: the noise floor from the A/A pair, per time metric:
# the largest difference between the two medians, and the widest 95%
# confidence interval of a median on either side (benchstat's +-).
aa_floor() {
	(cd "$out" && "$benchstat" -format csv -ignore /opts pristine="$1-pristine.txt" A/A="$1-aa.txt" 2>/dev/null) | awk -F, '
		$2 == "pristine" { next }
		$1 == "" && $2 != "" { unit = $2; next }
		$1 == "" || $1 == "geomean" || unit !~ /sec\/op$|\/s$/ { next }
		{
			a = $2; b = $4
			if (a <= 0) next
			d = (b - a) / a * 100; if (d < 0) d = -d
			if (d > maxd[unit]) { maxd[unit] = d; at[unit] = $1 }
			for (k = 3; k <= 5; k += 2) {
				ci = $k; sub(/%$/, "", ci); sub(/^±/, "", ci)
				if (ci == "∞") ci = 1e9
				if (ci + 0 > maxci[unit]) maxci[unit] = ci + 0
			}
			if (!(unit in seen)) { seen[unit] = 1; order[++n] = unit }
		}
		END {
			for (k = 1; k <= n; k++) {
				u = order[k]
				ci = maxci[u] >= 1e9 ? "unknown (too few samples)" : sprintf("+-%.0f%%", maxci[u])
				printf "A/A noise floor, %s: medians differ by at most %.1f%% (%s); widest confidence interval %s\n", u, maxd[u], at[u], ci
			}
		}'
}

# The tables, also kept as tables.txt, after the header.
table() { # TITLE BENCHSTAT-ARGS...
	local title=$1
	shift
	printf '### %s\n$ benchstat %s\n\n' "$title" "$*"
	(cd "$out" && "$benchstat" "$@")
	echo
}
{
	cat "$out/machine.txt"
	echo
} >"$out/tables.txt"
{
	if want kgo; then
		table "kgo produce hot path (pkg/kgo, no broker): pristine v1.22.3, its A/A rebuild, patched option off and on" \
			-ignore /opts pristine=kgo-pristine.txt A/A=kgo-aa.txt off=kgo-off.txt on=kgo-on.txt
		aa_floor kgo
		echo
	fi
	if want e2e; then
		table "end to end Produce, keyed, in-process kfake: pristine v1.22.3, its A/A rebuild, patched option off and on" \
			pristine=e2e-pristine.txt A/A=e2e-aa.txt off=e2e-off.txt on=e2e-on.txt
		aa_floor e2e
		echo
	fi
	if want failstop; then
		table "rejection path and recovery latency (patched, option on)" failstop.txt
	fi
	if want korder; then
		table "korder vs raw kgo (patched; impl=kgo has the option off)" -col /impl korder.txt
	fi
	if want isolation; then
		table "korder isolation of healthy partitions, kgo's default partitioner (healthy-ratio: 1 is perfect; the issue's target is 0.9 for fault=retryable)" isolation.txt
	fi
} | tee -a "$out/tables.txt"
echo "make bench: done in $(elapsed); raw results and tables.txt in $out"
