#!/usr/bin/env bash
# test-upstream.sh: run franz-go's own tests against the patched tree.
#
# 1. franz-go's pkg/kgo suite, with -race, inside upstream/franz-go, against a
#    kfake cluster started here as a separate process (three brokers on free
#    loopback ports). If KGO_SEEDS is already set, that cluster is used
#    instead and no kfake is started: the same suite then runs unchanged
#    against a real Kafka or Redpanda cluster.
# 2. kfake's own producer/sink tests (KFAKE_RUN), on the patched kfake in
#    the tree (pkg/kfake, materialized with franz-go) wired to the patched kgo
#    through a go.work. The kfake cluster of step 1 is built from it too
#    (tests/kfakeserver, through the repository's go.work).
#
# Failures are judged against upstream/baseline-failures.txt: a failure not in
# it fails this script; a baseline entry that passes is reported. A kgo run in
# which a test never finished (the suite hit TEST_TIMEOUT: a rare hang, seen
# once) is reported, with the stuck test's stacks, and run once more; the
# second run must pass.
#
# Knobs: KGO_TEST_RECORDS (default 50000), KGO_RUN (go test -run for kgo,
# default all), KFAKE_RUN, SUITES (default "kgo kfake"), TEST_TIMEOUT
# (default 8m; the kgo suite takes about 2 minutes here), TREE (the franz-go
# tree to test, a git repository; default upstream/franz-go, and
# upstream-pr.sh points it at each stacked PR).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tree=${TREE:-$root/upstream/franz-go}
baseline="$root/upstream/baseline-failures.txt"

: "${KGO_TEST_RECORDS:=50000}"
: "${KGO_RUN:=}"
: "${KFAKE_RUN:=Produce|Sink|Txn|Fault|Idempot|Transact|Batch}"
: "${SUITES:=kgo kfake}"
: "${TEST_TIMEOUT:=8m}"

[ -d "$tree/.git" ] || { echo "test-upstream: $tree is not materialized; run: make patches-apply" >&2; exit 1; }

work=$(mktemp -d)
server_pid=
cleanup() {
	if [ -n "$server_pid" ]; then
		kill "$server_pid" 2>/dev/null || true
		wait "$server_pid" 2>/dev/null || true
	fi
	chmod -R u+w "$work" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

rc=0
report() { # suite json run-pattern
	go run "$root/tests/suitereport" -suite "$1" -baseline "$baseline" -run "$3" "$2" || rc=1
}

# run_kgo ATTEMPT: one run of the kgo suite, against a kfake started for it
# unless KGO_SEEDS is set; the report goes to stdout and $work/kgo-ATTEMPT.txt.
run_kgo() {
	local attempt=$1 seeds=${KGO_SEEDS:-}
	if [ -z "$seeds" ]; then
		rm -f "$work/addrs"
		"$work/kfakeserver" -brokers 3 -addr-file "$work/addrs" >"$work/kfake.log" 2>&1 &
		server_pid=$!
		# Wait for the server to say it listens (it writes the file atomically).
		for _ in $(seq 1 300); do
			[ -s "$work/addrs" ] && break
			kill -0 "$server_pid" 2>/dev/null || { cat "$work/kfake.log" >&2; echo "test-upstream: kfakeserver exited" >&2; exit 1; }
			sleep 0.1
		done
		[ -s "$work/addrs" ] || { echo "test-upstream: kfakeserver did not start" >&2; exit 1; }
		seeds=$(cat "$work/addrs")
		echo "test-upstream: kfake cluster (3 brokers) at $seeds"
	else
		echo "test-upstream: using the existing cluster at KGO_SEEDS=$seeds"
	fi
	echo "test-upstream: go test -race ./pkg/kgo (KGO_TEST_RECORDS=$KGO_TEST_RECORDS${KGO_RUN:+, -run $KGO_RUN}, -timeout $TEST_TIMEOUT)"
	# GOWORK=off: the suite runs in franz-go's own module, exactly as upstream runs it.
	(cd "$tree" && KGO_SEEDS=$seeds KGO_TEST_RECORDS=$KGO_TEST_RECORDS GOWORK=off go test -race -count=1 -json -timeout "$TEST_TIMEOUT" ${KGO_RUN:+-run "$KGO_RUN"} ./pkg/kgo >"$work/kgo.json" 2>"$work/kgo.stderr") || true
	cat "$work/kgo.stderr" >&2
	local ok=0
	go run "$root/tests/suitereport" -suite kgo -baseline "$baseline" -run "${KGO_RUN:-}" "$work/kgo.json" | tee "$work/kgo-$attempt.txt" || ok=1
	if [ -n "$server_pid" ]; then
		kill "$server_pid" 2>/dev/null || true
		wait "$server_pid" 2>/dev/null || true
		server_pid=
	fi
	return $ok
}

if [[ " $SUITES " == *" kgo "* ]]; then
	if [ -z "${KGO_SEEDS:-}" ]; then
		(cd "$root" && go build -o "$work/kfakeserver" ./tests/kfakeserver)
	fi
	if ! run_kgo 1; then
		# franz-go's suite has hung, rarely (once in a dozen fresh-clone
		# runs here), in a test against kfake, and then hits the timeout.
		# A run in which a test did not finish gets one more run, on a
		# new kfake; the hung test's name and stacks are printed above,
		# and the rerun must pass. A test that fails is never rerun.
		if grep -q ' did not finish' "$work/kgo-1.txt" && ! grep -q ' FAIL .* is not in the baseline' "$work/kgo-1.txt"; then
			echo "test-upstream: WARNING: a kgo test did not finish (report above); running the kgo suite once more"
			run_kgo 2 || rc=1
		else
			rc=1
		fi
	fi
fi

if [[ " $SUITES " == *" kfake "* ]]; then
	[ -d "$tree/pkg/kfake" ] || { echo "test-upstream: $tree has no pkg/kfake; run: make patches-apply" >&2; exit 1; }
	cat >"$work/kfake.work" <<EOW
go 1.26.0

use (
	$tree/pkg/kfake
	$tree
)
EOW
	echo "test-upstream: kfake (patched, pkg/kfake): go test -race -run '$KFAKE_RUN' (against the patched tree)"
	(cd "$tree/pkg/kfake" && GOWORK="$work/kfake.work" go test -race -count=1 -json -timeout "$TEST_TIMEOUT" -run "$KFAKE_RUN" . >"$work/kfake.json" 2>"$work/kfake.stderr") || true
	cat "$work/kfake.stderr" >&2
	report kfake "$work/kfake.json" "$KFAKE_RUN"
fi

exit $rc
