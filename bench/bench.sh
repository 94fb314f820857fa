#!/usr/bin/env bash
# bench.sh: `make bench`. The same benchmark source compiled three ways and
# run alternately, then benchstat tables:
#
#   pristine  franz-go v1.22.3 from the module proxy (upstream/patchset.sh
#             pristine), plus the first patch of the series, which only adds
#             kgo's hot path benchmark file (checked: every file it touches
#             is a _test.go file), and this module built with -tags pristine
#             against that tree;
#   off       the patched tree (upstream/franz-go, the repository's go.work),
#             FailPartitionOnProduceFailure off;
#   on        the same patched binaries with KGO_BENCH_FAIL_STOP=1, which
#             turns the option on in kgo's hot path benchmarks
#             (pkg/kgo/produce_fail_stop_test.go) and in bench/e2e.
#
# Groups (BENCH_GROUPS, default all four, in this order in every round):
#
#   kgo       pkg/kgo BenchmarkBufferRecord and BenchmarkProduce (no broker),
#             pristine, off, on.
#   e2e       bench/e2e BenchmarkProduce: keyed records to an in-process
#             kfake, partitions=8/1024 x codec=none/lz4/zstd, pristine, off,
#             on.
#   failstop  on only: pkg/kgo BenchmarkProduceRejected, bench/e2e
#             BenchmarkRejected and BenchmarkRecovery.
#   korder    patched only: pkg/korder BenchmarkProduce, impl=kgo,
#             impl=kgo+closure and impl=korder, failures=0%/1%. Each impl
#             runs in a process of its own, in an order that rotates from
#             round to round: run in one process, the first impl is measured
#             on a fresh heap and the others after it, which biased the
#             comparison by as much as the difference it measures.
#
# Every test binary is built once, before any run. Then each round runs every
# group once per side, one -test.count=1 run at a time, appending to one file
# per group and side in BENCH_OUT; alternating spreads machine noise over all
# sides instead of biasing one. Finally benchstat (pinned, installed from
# the Go module proxy) prints one table per group.
#
# Environment:
#   BENCH_COUNT         rounds (default 10).
#   BENCH_GROUPS        which groups to run, space separated (default
#                       "kgo e2e failstop korder").
#   BENCHTIME           -test.benchtime for every group, unless the group's
#                       own variable below is set; for a quick check,
#                       BENCH_COUNT=2 BENCHTIME=2000x.
#   BENCHTIME_KGO       kgo group, and pkg/kgo BenchmarkProduceRejected
#                       (default 1s).
#   BENCHTIME_E2E       e2e group, records per run (default 500000x).
#   BENCHTIME_REJECTED  bench/e2e BenchmarkRejected (default 1s).
#   BENCHTIME_RECOVERY  bench/e2e BenchmarkRecovery, failures per run
#                       (default 500x).
#   BENCHTIME_KORDER    korder group, records per run (default 1000000x: a
#                       run must see a handful of 1% failures).
#   BENCH_OUT           directory for the raw results (one file per group and
#                       side), machine.txt and tables.txt (default
#                       bench/out/<UTC time>; bench/out is gitignored and
#                       bench/out/latest points at the last run). Re-print a
#                       table from it with bench/out/bin/benchstat.
#   BENCHSTAT           a benchstat binary to use instead of installing
#                       golang.org/x/perf/cmd/benchstat@$BENCHSTAT_VERSION
#                       into bench/out/bin.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tree=$root/upstream/franz-go
patches=$root/patches
benchstat_version=${BENCHSTAT_VERSION:-v0.0.0-20260908200009-22c9c6c9d4da}
on_env=KGO_BENCH_FAIL_STOP=1

die() { printf 'bench: %s\n' "$*" >&2; exit 1; }

count=${BENCH_COUNT:-10}
[[ $count =~ ^[1-9][0-9]*$ ]] || die "BENCH_COUNT must be a positive integer, got '$count'"
read -r -a groups <<<"${BENCH_GROUPS:-kgo e2e failstop korder}"
[[ ${#groups[@]} -gt 0 ]] || die "BENCH_GROUPS is empty"
for g in "${groups[@]}"; do
	case $g in
	kgo | e2e | failstop | korder) ;;
	*) die "BENCH_GROUPS: unknown group '$g' (kgo, e2e, failstop, korder)" ;;
	esac
done
want() { [[ " ${groups[*]} " == *" $1 "* ]]; }

bt_kgo=${BENCHTIME_KGO:-${BENCHTIME:-1s}}
bt_e2e=${BENCHTIME_E2E:-${BENCHTIME:-500000x}}
bt_rejected=${BENCHTIME_REJECTED:-${BENCHTIME:-1s}}
bt_recovery=${BENCHTIME_RECOVERY:-${BENCHTIME:-500x}}
bt_korder=${BENCHTIME_KORDER:-${BENCHTIME:-1000000x}}

[[ -d $tree/.git ]] || die "upstream/franz-go is not materialized; run: make patches-apply"

stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=${BENCH_OUT:-$root/bench/out/$stamp}
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [[ -z ${BENCH_OUT:-} ]]; then
	ln -sfn "$stamp" "$root/bench/out/latest"
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
	printf 'command: BENCH_COUNT=%s BENCH_GROUPS="%s" BENCHTIME_KGO=%s BENCHTIME_E2E=%s BENCHTIME_REJECTED=%s BENCHTIME_RECOVERY=%s BENCHTIME_KORDER=%s bash bench/bench.sh\n' \
		"$count" "${groups[*]}" "$bt_kgo" "$bt_e2e" "$bt_rejected" "$bt_recovery" "$bt_korder"
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
	benchstat=$root/bench/out/bin/benchstat
	if [[ ! -x $benchstat ]] || ! go version -m "$benchstat" 2>/dev/null | grep -q "golang.org/x/perf[[:space:]]*$benchstat_version"; then
		echo "installing benchstat@$benchstat_version into bench/out/bin"
		# From $work, so that no go.mod or go.work applies.
		(cd "$work" && GOWORK=off GOFLAGS="" GOBIN="$root/bench/out/bin" go install "golang.org/x/perf/cmd/benchstat@$benchstat_version")
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
fi
if want e2e || want failstop; then
	build e2e-patched "$root" "$root/go.work" ./bench/e2e
fi
if want e2e; then
	build e2e-pristine "$root" "$work/pristine/go.work" -tags pristine ./bench/e2e
fi
if want korder; then
	build korder "$root" "$root/go.work" ./pkg/korder
fi
echo

# run FILE DIR BINARY BENCH BENCHTIME [VAR=val ...]: one run of a test binary,
# from its package directory as go test would, with KGO_BENCH_FAIL_STOP
# unset unless given, appending the results to FILE.
run() {
	local file=$1 dir=$2 binary=$3 bench=$4 benchtime=$5
	shift 5
	if ! (cd "$dir" && env -u KGO_BENCH_FAIL_STOP "$@" "$bin/$binary.test" \
		-test.run '^$' -test.bench "$bench" -test.benchtime "$benchtime" \
		-test.benchmem -test.count 1 -test.timeout 30m) >>"$out/$file" 2>&1; then
		echo "bench: $binary.test -test.bench '$bench' ${*:-} failed; the end of $out/$file:" >&2
		tail -n 30 "$out/$file" >&2
		exit 1
	fi
}

kgo_hot='^(BenchmarkBufferRecord|BenchmarkProduce)$'
for g in "${groups[@]}"; do
	case $g in
	kgo | e2e) for side in pristine off on; do : >"$out/$g-$side.txt"; done ;;
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
run_kgo() {
	run kgo-pristine.txt "$pristine/pkg/kgo" kgo-pristine "$kgo_hot" "$bt_kgo"
	run kgo-off.txt "$tree/pkg/kgo" kgo-patched "$kgo_hot" "$bt_kgo"
	run kgo-on.txt "$tree/pkg/kgo" kgo-patched "$kgo_hot" "$bt_kgo" "$on_env"
}
run_e2e() {
	run e2e-pristine.txt "$root/bench/e2e" e2e-pristine '^BenchmarkProduce$' "$bt_e2e"
	run e2e-off.txt "$root/bench/e2e" e2e-patched '^BenchmarkProduce$' "$bt_e2e"
	run e2e-on.txt "$root/bench/e2e" e2e-patched '^BenchmarkProduce$' "$bt_e2e" "$on_env"
}
run_failstop() {
	run failstop.txt "$tree/pkg/kgo" kgo-patched '^BenchmarkProduceRejected$' "$bt_kgo" "$on_env"
	run failstop.txt "$root/bench/e2e" e2e-patched '^BenchmarkRejected$' "$bt_rejected" "$on_env"
	run failstop.txt "$root/bench/e2e" e2e-patched '^BenchmarkRecovery$' "$bt_recovery" "$on_env"
}
korder_impls=(kgo 'kgo\+closure' korder) # -test.bench patterns
run_korder() {
	local n=${#korder_impls[@]} j
	for ((j = 0; j < n; j++)); do
		# i is the round, from 1; round 1 runs kgo first, which makes it
		# benchstat's base column.
		run korder.txt "$root/pkg/korder" korder "^BenchmarkProduce\$/^failures=/^impl=${korder_impls[(i - 1 + j) % n]}\$" "$bt_korder"
	done
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
		table "kgo produce hot path (pkg/kgo, no broker): pristine v1.22.3 vs patched, option off and on" \
			pristine=kgo-pristine.txt off=kgo-off.txt on=kgo-on.txt
	fi
	if want e2e; then
		table "end to end Produce, keyed, in-process kfake: pristine v1.22.3 vs patched, option off and on" \
			pristine=e2e-pristine.txt off=e2e-off.txt on=e2e-on.txt
	fi
	if want failstop; then
		table "rejection path and recovery latency (patched, option on)" failstop.txt
	fi
	if want korder; then
		table "korder vs raw kgo (patched; impl=kgo has the option off)" -col /impl korder.txt
	fi
} | tee -a "$out/tables.txt"
echo "make bench: done in $(elapsed); raw results and tables.txt in $out"
