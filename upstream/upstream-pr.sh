#!/usr/bin/env bash
# upstream-pr.sh: write the upstream pull request kit into dist/upstream-pr/.
#
#   dist/upstream-pr/patches/NNNN-*.patch  the series, with the downstream-only
#                                          metadata (the Upstream-Status
#                                          trailer) stripped, numbered in order
#   dist/upstream-pr/PR.md                 the pull request description
#   dist/upstream-pr/compat.txt            which franz-go v1.22.x versions the
#                                          series applies to and vets on
#
# The stripped series is checked to apply (git am, zero fuzz) to the pinned
# version and to pass go build and go vet there; it is also tried against
# every other v1.22.x version the Go module proxy serves.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out="$root/dist/upstream-pr"
module=github.com/twmb/franz-go
pinned=$(awk '$1 == "version" { print $2 }' "$root/upstream/PIN")
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
export GIT_COMMITTER_NAME=upstream-pr GIT_COMMITTER_EMAIL=upstream-pr@localhost

rm -rf "$out"
mkdir -p "$out/patches"

# 1. Strip the series.
n=0
while IFS= read -r name; do
	n=$((n + 1))
	dest=$(printf '%s/patches/%04d-%s' "$out" "$n" "$name")
	# Drop the Upstream-Status trailer and the blank line before it, so
	# the message ends where the upstream commit message ends.
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
done < <(grep -v -E '^[[:space:]]*(#|$)' "$root/patches/series")
echo "upstream-pr: $n patches stripped into dist/upstream-pr/patches"

# 2. Try the stripped series on every v1.22.x version the proxy serves.
versions=$(cd "$work" && GOFLAGS= GOWORK=off go list -m -versions "$module" | tr ' ' '\n' | grep -E '^v1\.22\.' || true)
: >"$out/compat.txt"
pinned_ok=0
for v in $versions; do
	dir=$(cd "$work" && GOFLAGS= GOWORK=off GOMODCACHE="$work/modcache" go mod download -json "$module@$v" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
	tree="$work/tree-$v"
	cp -R "$dir" "$tree"
	chmod -R u+w "$tree"
	result=
	(
		cd "$tree"
		git init -q
		git add -A
		git -c user.name=upstream -c user.email=upstream@localhost commit -q -m "$module $v"
	)
	if ! (cd "$tree" && git am -q "$out"/patches/*.patch) >"$work/am.log" 2>&1; then
		failed=$(sed -n 's/^Patch failed at \(.*\)$/\1/p' "$work/am.log" | head -1)
		result="does not apply (${failed:-see git am})"
	elif ! (cd "$tree" && GOWORK=off GOFLAGS= go build ./pkg/... && GOWORK=off GOFLAGS= go vet ./pkg/kgo) >"$work/vet.log" 2>&1; then
		result="applies; go build/vet fails: $(head -1 "$work/vet.log")"
	else
		result="applies; go build and go vet ./pkg/kgo pass"
		[ "$v" = "$pinned" ] && pinned_ok=1
	fi
	printf '%s%s: %s\n' "$v" "$([ "$v" = "$pinned" ] && echo ' (pinned)')" "$result" | tee -a "$out/compat.txt"
done
if [ "$pinned_ok" != 1 ]; then
	echo "upstream-pr: the stripped series does not apply and vet on the pinned $pinned" >&2
	exit 1
fi

# 3. The pull request description.
{
	cat "$root/upstream/pr-description.md"
	echo
	echo "## The series"
	echo
	for f in "$out"/patches/*.patch; do
		subject=$(awk '/^Subject: / { s = substr($0, 10); while ((getline line) > 0 && line ~ /^ /) s = s line; print s; exit }' "$f")
		stat=$(git -C "$root" apply --numstat "$f" | awk '{a += $1; d += $2} END {printf "+%d -%d", a, d}')
		echo "1. \`$subject\` ($stat)"
	done
	echo
	echo "Each commit builds, vets and passes its own tests on its own. The full"
	echo "kgo suite passes with \`-race\` against kfake with the series applied."
	echo
	echo "## Compatibility"
	echo
	echo '```'
	cat "$out/compat.txt"
	echo '```'
	echo
	echo "## Proposed CHANGELOG text"
	echo
	for f in "$out"/patches/*.patch; do
		awk '/^Proposed CHANGELOG text:/ { on = 1; next } on && /^(diff --git|---$)/ { exit } on { print }' "$f"
	done | sed -e 's/^  //' -e '/^[[:space:]]*$/d'
} >"$out/PR.md"
echo "upstream-pr: wrote dist/upstream-pr/PR.md and compat.txt"
