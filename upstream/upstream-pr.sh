#!/usr/bin/env bash
# upstream-pr.sh: write the upstream pull request kits into dist/upstream-pr/,
# one folder per pull request, one pull request per concern, in the order they
# are sent (PRS below; the folder names are the concerns' letters):
#
#   c-delivery-timeout   RecordDeliveryTimeout measured from batch creation
#   d-unsure-batches     an idempotent batch whose response was lost is
#                        retried until answered, one that may be in the log
#                        is never renumbered; ErrPossiblyWritten
#   f-kfake-epoch        kfake: an idempotent producer's epoch per partition
#                        (kfake, at its pinned version, is in pkg/kfake of
#                        every tree, as patchset.sh materializes it)
#   a-fail-stop          the benchmarks and FailPartitionOnProduceFailure
#                        (#852, the core: option, hook, error, recovery)
#   h-topic-failures     a topic fails (-1) for records failing before
#                        their partitions are known
#   i-keep-failed        RecoverProducePartitionKeepFailed
#   j-transactions       a transaction with a failed partition cannot commit
#   b-steering           unkeyed records routed around failed partitions
#   g-partition-bound    a per-partition buffer bound that fails a stalled partition
#
# Each folder holds:
#
#   NNNN-*.patch   the PR's commits, with the downstream-only metadata (the
#                  Upstream-Status trailer) stripped, numbered in order
#   PR.md          the pull request text: upstream/pr/<name>.md, then the
#                  commits, the stack, the checks below, the CHANGELOG text
#   compat.txt     the checks' results for this PR
#
# and dist/upstream-pr/README.md (upstream/pr-description.md plus every PR's
# results) says in which order they go.
#
# The PRs stack in PRS order: d is reviewed on top of c, a on top of c+d, b on
# top of c+d+a. A PR may take a patch from earlier in patches/series than the
# PRs before it (a takes the benchmarks, first in the series so that the same
# benchmark source runs on the pinned version), as long as the stack applies;
# every patch of the series goes to exactly one PR. Checks, against the
# pinned version:
#
# 1. Each PR's patches apply with git am (zero fuzz) after the previous PRs'
#    patches, and go build ./pkg/... and go vet ./pkg/kgo pass at each step.
# 2. The same stack, in the same order, on every other v1.22.x version the Go
#    module proxy serves (stopping at the first PR that does not apply); the
#    full stack's line is the series' compatibility.
# 3. For the bug fixes that do not need a (PR_ALONE below): the PR's code, its
#    test files left out, applies alone to the pinned version and builds and
#    vets there; the test named in PR_ALONE fails on the pinned version and
#    passes with that code alone. Set UPSTREAM_PR_TESTS=0 to skip the test
#    runs (about a minute each to build the test binary on 2 cores).
# 4. UPSTREAM_PR_SUITE=1: franz-go's kgo suite (upstream/test-upstream.sh,
#    -race, against a kfake cluster it starts) on each stack of the pinned
#    version, about 3-4 minutes each; the result goes into PR.md and
#    compat.txt. The script fails if a suite fails.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out="$root/dist/upstream-pr"
module=github.com/twmb/franz-go
pinned=$(awk '$1 == "version" { print $2 }' "$root/upstream/PIN")
kfake_module=$(awk '$1 == "kfake-module" { print $2 }' "$root/upstream/PIN")
kfake_version=$(awk '$1 == "kfake-version" { print $2 }' "$root/upstream/PIN")
: "${UPSTREAM_PR_SUITE:=0}"
: "${UPSTREAM_PR_TESTS:=1}"

# The PRs in the order they are sent, each with its patches (in series order).
# A patch added to patches/series must be added here too (the check below
# names it).
PRS=(c-delivery-timeout d-unsure-batches f-kfake-epoch a-fail-stop h-topic-failures i-keep-failed j-transactions b-steering g-partition-bound k-failed-record-handler l-buffered-before-failure m-rejected-together)
declare -A PR_PATCHES=(
	[c-delivery-timeout]="kgo-measure-RecordDeliveryTimeout-from-when-a-record-s-batch.patch"
	[d-unsure-batches]="kgo-retry-and-never-renumber-a-batch-that-may-have-been-writ.patch"
	[f-kfake-epoch]="kfake-check-an-idempotent-producer-s-epoch-per-partition.patch"
	[a-fail-stop]="kgo-add-produce-hot-path-benchmarks.patch kgo-add-FailPartitionOnProduceFailure.patch"
	[h-topic-failures]="kgo-fail-a-produce-topic-whose-records-fail-before-partition.patch"
	[i-keep-failed]="kgo-add-RecoverProducePartitionKeepFailed.patch"
	[j-transactions]="kgo-refuse-to-commit-a-transaction-in-which-a-produce-partit.patch"
	[b-steering]="kgo-route-unkeyed-records-around-failed-produce-partitions.patch"
	[g-partition-bound]="kgo-add-MaxBufferedPartitionRecords.patch"
	[k-failed-record-handler]="kgo-add-ProducerOnPartitionFailedRecord.patch"
	[l-buffered-before-failure]="kgo-keep-records-buffered-before-a-partition-s-failure-ahead.patch"
	[m-rejected-together]="kgo-promise-the-records-a-failed-partition-rejects-together.patch"
)
# PRs whose code applies alone to the pinned version:
# "EXCLUDES|TESTFILE|TESTS|ONLY". EXCLUDES are paths (git apply --exclude)
# left out besides every *_test.go; TESTS (a go test -run list) are taken
# from TESTFILE as the PR leaves it (ONLY=1: only the TESTS functions from it,
# with the imports they use) and must fail on the pinned version and pass
# with the code alone. c's other tests use its recBatch.created, so only the
# test that does not is taken. d no longer excludes anything: since it comes
# before a, it does not edit a's doc.
declare -A PR_ALONE=(
	[c-delivery-timeout]="|pkg/kgo/produce_timeout_test.go|TestDeliveryTimeoutOldTimestamp|1"
	[d-unsure-batches]="|pkg/kgo/produce_unsure_test.go|TestProduceLostResponseKeepsBatchUnsure|0"
)

work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
export GIT_COMMITTER_NAME=upstream-pr GIT_COMMITTER_EMAIL=upstream-pr@localhost

# The PRs must cover patches/series exactly, each patch once, and each PR
# must list its patches in series order.
series=$(grep -v -E '^[[:space:]]*(#|$)' "$root/patches/series")
# shellcheck disable=SC2086 # PR_PATCHES values are space-separated lists
listed=$(for pr in "${PRS[@]}"; do printf '%s\n' ${PR_PATCHES[$pr]}; done)
if [ "$(sort <<<"$series")" != "$(sort <<<"$listed")" ]; then
	echo "upstream-pr: the PRs in upstream/upstream-pr.sh do not cover patches/series, each patch once; assign every patch to one PR in PR_PATCHES:" >&2
	diff <(sort <<<"$series") <(sort <<<"$listed") | sed -n -e 's/^< /  in patches\/series, in no PR: /p' -e 's/^> /  in PR_PATCHES, not in patches\/series (or twice): /p' >&2 || true
	exit 1
fi
for pr in "${PRS[@]}"; do
	# shellcheck disable=SC2086
	mine=$(printf '%s\n' ${PR_PATCHES[$pr]})
	if [ "$(grep -F -x -f <(echo "$mine") <<<"$series")" != "$mine" ]; then
		echo "upstream-pr: $pr lists its patches out of patches/series order" >&2
		exit 1
	fi
done
for pr in "${PRS[@]}"; do
	[ -f "$root/upstream/pr/$pr.md" ] || { echo "upstream-pr: upstream/pr/$pr.md is missing" >&2; exit 1; }
done

rm -rf "$out"
mkdir -p "$out"

# 1. Strip each PR's patches into its folder.
for pr in "${PRS[@]}"; do
	mkdir -p "$out/$pr"
	n=0
	for name in ${PR_PATCHES[$pr]}; do
		n=$((n + 1))
		dest=$(printf '%s/%s/%04d-%s' "$out" "$pr" "$n" "$name")
		# Drop the Upstream-Status trailer and the blank line before it,
		# so the message ends where the upstream commit message ends.
		awk '
			/^Upstream-Status:/ && !done { if (blank) { blank = 0 }; done = 1; next }
			{ if (blank) { print ""; blank = 0 } }
			/^$/ && !done { blank = 1; next }
			{ print }
		' "$root/patches/$name" >"$dest"
		if grep -q '^Upstream-Status:' "$dest"; then
			echo "upstream-pr: $name still carries downstream metadata" >&2
			exit 1
		fi
	done
	: >"$out/$pr/compat.txt"
	echo "upstream-pr: $pr: $n patch(es) stripped into dist/upstream-pr/$pr"
done

# stack_label PR: "a-fail-stop+b-steering" for b, and so on.
stack_label() {
	local label='' p
	for p in "${PRS[@]}"; do
		label=${label:+$label+}$p
		[ "$p" = "$1" ] && break
	done
	echo "$label"
}

# pristine VERSION DIR: a git repository of the module at VERSION in DIR,
# with the pinned kfake in pkg/kfake.
pristine() {
	local src ksrc
	src=$(cd "$work" && GOFLAGS='' GOWORK=off GOMODCACHE="$work/modcache" go mod download -json "$module@$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
	ksrc=$(cd "$work" && GOFLAGS='' GOWORK=off GOMODCACHE="$work/modcache" go mod download -json "$kfake_module@$kfake_version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
	cp -R "$src" "$2"
	mkdir -p "$2/pkg/kfake"
	cp -R "$ksrc/." "$2/pkg/kfake/"
	chmod -R u+w "$2"
	(
		cd "$2"
		git init -q
		git add -A
		git -c user.name=upstream -c user.email=upstream@localhost commit -q -m "$module $1"
		git tag upstream-base
	)
}

# build_vet DIR: go build ./pkg/... and go vet ./pkg/kgo; prints the first
# error line on failure.
build_vet() {
	if ! (cd "$1" && GOWORK=off GOFLAGS='' go build ./pkg/... && GOWORK=off GOFLAGS='' go vet ./pkg/kgo) >"$work/vet.log" 2>&1; then
		grep -v '^#' "$work/vet.log" | head -1
		return 1
	fi
}

# note PR LINE: a result line for PR's compat.txt, echoed.
note() {
	printf '%s\n' "$2" | tee -a "$out/$1/compat.txt"
}

# run_suite PR DIR: franz-go's kgo suite on DIR through test-upstream.sh.
suite_failed=0
run_suite() {
	local pr=$1 dir=$2 log="$work/suite-$1.log" rc=0
	echo "upstream-pr: $pr: kgo suite on $(stack_label "$pr") (test-upstream.sh, TREE=$dir, SUITES=kgo)"
	TREE=$dir SUITES=kgo bash "$root/upstream/test-upstream.sh" >"$log" 2>&1 || rc=$?
	local lines
	lines=$(grep -E '^kgo: ' "$log" | grep -v -E '^kgo: (known baseline failure|NOTE)' | sed 's/^kgo: //' || true)
	[ -n "$lines" ] || lines="no result line; last output: $(tail -1 "$log")"
	if [ "$rc" = 0 ]; then
		note "$pr" "$pinned (pinned): $(stack_label "$pr"): kgo suite (-race, kfake, test-upstream.sh): pass: $(echo "$lines" | head -1)"
	else
		suite_failed=1
		note "$pr" "$pinned (pinned): $(stack_label "$pr"): kgo suite (-race, kfake, test-upstream.sh): FAIL: $(echo "$lines" | tr '\n' ';' | sed 's/;$//')"
		tail -40 "$log" >&2
	fi
	grep -E '^kgo: known baseline failure' "$log" | sed "s/^kgo: /  $pinned suite: /" >>"$out/$pr/compat.txt" || true
}

# 2. The stacks, on every v1.22.x version the proxy serves.
versions=$(cd "$work" && { GOFLAGS='' GOWORK=off go list -m -versions "$module" | tr ' ' '\n' | grep -E '^v1\.22\.' || true; })
echo "$versions" | grep -qx "$pinned" || versions="$versions $pinned"
pinned_ok=0
pinned_bad=0
for v in $versions; do
	tree="$work/tree-$v"
	pristine "$v" "$tree"
	vl=$v
	[ "$v" = "$pinned" ] && vl="$v (pinned)"
	stopped=
	for pr in "${PRS[@]}"; do
		label=$(stack_label "$pr")
		if [ -n "$stopped" ]; then
			note "$pr" "$vl: $label: not tried, $stopped does not apply"
			continue
		fi
		if ! (cd "$tree" && git am -q "$out/$pr"/*.patch) >"$work/am.log" 2>&1; then
			failed=$(sed -n 's/^Patch failed at \(.*\)$/\1/p' "$work/am.log" | head -1)
			note "$pr" "$vl: $label: does not apply with git am (${failed:-see git am})"
			(cd "$tree" && git am --abort) >/dev/null 2>&1 || true
			stopped=$pr
			continue
		fi
		if err=$(build_vet "$tree"); then
			note "$pr" "$vl: $label: applies with git am; go build ./pkg/... and go vet ./pkg/kgo pass"
			[ "$v" = "$pinned" ] && [ "$pr" = "${PRS[-1]}" ] && pinned_ok=1
		else
			note "$pr" "$vl: $label: applies with git am; go build/vet fails: $err"
			[ "$v" = "$pinned" ] && pinned_bad=1
		fi
		if [ "$v" = "$pinned" ]; then
			git -C "$tree" tag "pr-$pr"
			[ "$UPSTREAM_PR_SUITE" = 1 ] && run_suite "$pr" "$tree"
		fi
	done
done
if [ "$pinned_ok" != 1 ] || [ "$pinned_bad" != 0 ]; then
	echo "upstream-pr: the stacked PRs do not all apply, build and vet on the pinned $pinned" >&2
	exit 1
fi

# only_funcs FILE 'TestA|TestB': FILE's package clause, the functions named,
# and the imports of FILE that they use.
only_funcs() {
	local body
	body=$(awk -v want="$2" '
		BEGIN { n = split(want, w, "|") }
		/^func / { on = 0; for (i = 1; i <= n; i++) if (index($0, "func " w[i] "(") == 1) on = 1 }
		on { print }
		on && /^}/ { on = 0; print "" }
	' "$1")
	sed -n '/^package /p' "$1"
	echo
	echo 'import ('
	awk '/^import \(/ { on = 1; next } on && /^\)/ { exit } on && NF { print }' "$1" | while read -r line; do
		path=${line#*\"}
		path=${path%\"*}
		name=$(echo "$line" | awk '{ print (NF > 1 ? $1 : "") }')
		[ -n "$name" ] || name=${path##*/}
		if grep -q "\b$name\." <<<"$body"; then echo "	$line"; fi
	done
	echo ')'
	echo
	echo "$body"
}

# 3. The bug fixes whose code applies alone to the pinned version.
alone_failed=0
for pr in "${PRS[@]}"; do
	[ -n "${PR_ALONE[$pr]:-}" ] || continue
	IFS='|' read -r excludes testfile tests only <<<"${PR_ALONE[$pr]}"
	dir="$work/alone-$pr"
	pristine "$pinned" "$dir"
	args=(--exclude='*_test.go')
	for x in $excludes; do args+=(--exclude="$x"); done
	what="its code alone (${PR_PATCHES[$pr]} without its tests${excludes:+ and $excludes})"

	# The test, as the PR leaves it, against the pinned version first.
	if [ "$UPSTREAM_PR_TESTS" != 0 ]; then
		git -C "$work/tree-$pinned" show "pr-$pr:$testfile" >"$work/testfile.go"
		if [ "$only" = 1 ]; then
			only_funcs "$work/testfile.go" "$tests" >"$dir/$testfile"
		else
			cp "$work/testfile.go" "$dir/$testfile"
		fi
		if (cd "$dir" && GOWORK=off GOFLAGS='' go test -count=1 -run "^($tests)\$" ./pkg/kgo) >"$work/test.log" 2>&1; then
			note "$pr" "$pinned (pinned): $tests ($testfile) passes on $pinned: it does not show the bug"
			alone_failed=1
		elif grep -q -E '^(FAIL.*\[(build|setup) failed\]|# )' "$work/test.log"; then
			note "$pr" "$pinned (pinned): $tests ($testfile) does not build on $pinned: $(grep -v '^#' "$work/test.log" | head -1)"
			alone_failed=1
		else
			note "$pr" "$pinned (pinned): $tests fails on $pinned as it must ($(grep -c -E '^--- FAIL' "$work/test.log") test(s) and $(grep -c -E '^[[:space:]]+--- FAIL' "$work/test.log") subtest(s) failed)"
		fi
	fi

	for name in ${PR_PATCHES[$pr]}; do
		f=$(ls "$out/$pr/"*"-$name")
		if ! (cd "$dir" && git apply "${args[@]}" "$f") >"$work/apply.log" 2>&1; then
			note "$pr" "$pinned (pinned): $what: does not apply: $(head -1 "$work/apply.log")"
			alone_failed=1
			continue 2
		fi
	done
	if err=$(build_vet "$dir"); then
		note "$pr" "$pinned (pinned): $what: applies alone with git apply; go build ./pkg/... and go vet ./pkg/kgo pass"
	else
		note "$pr" "$pinned (pinned): $what: applies alone; go build/vet fails: $err"
		alone_failed=1
		continue
	fi
	if [ "$UPSTREAM_PR_TESTS" != 0 ]; then
		if (cd "$dir" && GOWORK=off GOFLAGS='' go test -count=1 -run "^($tests)\$" ./pkg/kgo) >"$work/test.log" 2>&1; then
			note "$pr" "$pinned (pinned): $tests passes with $what"
		else
			note "$pr" "$pinned (pinned): $tests FAILS with $what: $(grep -m1 -E -- '--- FAIL|^FAIL' "$work/test.log")"
			alone_failed=1
		fi
	fi
done

# 4. The pull request texts.
# changelog PATCH...: each patch's proposed CHANGELOG text: an indented block
# after a "Proposed CHANGELOG text:" line, or the (quoted) paragraph that
# starts on a "Proposed CHANGELOG:" line.
changelog() {
	local f
	for f in "$@"; do
		awk '
			/^Proposed CHANGELOG( text)?:/ {
				sub(/^Proposed CHANGELOG( text)?:[[:space:]]*/, "")
				if ($0 == "") { mode = "block" } else { mode = "inline"; text = $0 }
				next
			}
			mode == "inline" && $0 != "" { text = text " " $0; next }
			mode == "inline" { gsub(/^"|"$/, "", text); print "* " text; exit }
			mode == "block" && ($0 == "" || /^  /) { print; next }
			mode == "block" { exit }
		' "$f"
	done | sed -e 's/^  //' -e '/^[[:space:]]*$/d'
}
for i in "${!PRS[@]}"; do
	pr=${PRS[$i]}
	{
		cat "$root/upstream/pr/$pr.md"
		echo
		echo "## Commits"
		echo
		for f in "$out/$pr"/*.patch; do
			subject=$(awk '/^Subject: / { s = substr($0, 10); while ((getline line) > 0 && line ~ /^ /) s = s line; print s; exit }' "$f")
			stat=$(git -C "$root" apply --numstat "$f" | awk '{a += $1; d += $2} END {printf "+%d -%d", a, d}')
			echo "1. \`$subject\` ($stat)"
		done
		echo
		if [ "$i" = 0 ]; then
			echo "Applies to $pinned on its own."
		else
			echo "Stacked: applies to $pinned after $(stack_label "${PRS[$((i - 1))]}" | sed 's/+/, /g') (in that order)."
		fi
		echo
		echo "## Checks"
		echo
		echo '```'
		cat "$out/$pr/compat.txt"
		echo '```'
		log=$(changelog "$out/$pr"/*.patch)
		if [ -n "$log" ]; then
			echo
			echo "## Proposed CHANGELOG text"
			echo
			echo "$log"
		fi
	} >"$out/$pr/PR.md"
done
{
	cat "$root/upstream/pr-description.md"
	for pr in "${PRS[@]}"; do
		echo
		echo "## $pr"
		echo
		echo '```'
		cat "$out/$pr/compat.txt"
		echo '```'
	done
} >"$out/README.md"
echo "upstream-pr: wrote dist/upstream-pr/{$(IFS=,; echo "${PRS[*]}")}/ (patches, PR.md, compat.txt) and dist/upstream-pr/README.md"

if [ "$alone_failed" != 0 ]; then
	echo "upstream-pr: a bug fix does not apply alone or its test does not show the bug (above)" >&2
	exit 1
fi
if [ "$suite_failed" != 0 ]; then
	echo "upstream-pr: a kgo suite failed (above)" >&2
	exit 1
fi
