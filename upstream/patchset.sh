#!/usr/bin/env bash
# patchset.sh: materialize the pinned franz-go and carry the patch series.
#
#   patchset.sh apply [--force]   download the pinned modules (franz-go, and
#                                 kfake into pkg/kfake, its path in franz-go's
#                                 repository) through the Go module proxy,
#                                 check their hashes, and rebuild
#                                 upstream/franz-go as a git repo: one base
#                                 commit, then one commit per patch (git am,
#                                 in the order of patches/series, zero fuzz).
#   patchset.sh export            regenerate patches/ from upstream/franz-go.
#   patchset.sh check             drift check: fresh download into a
#                                 throwaway module cache, apply, re-export,
#                                 and compare with patches/. Also fails if
#                                 upstream/franz-go holds unexported work.
#   patchset.sh base              print the base commit of upstream/franz-go.
#
# Everything is deterministic: the base commit has a fixed author, committer
# and date, so its hash is the same on every machine, and export uses pinned
# format-patch flags, so re-exporting an unchanged tree is a byte-for-byte
# no-op.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tree="$root/upstream/franz-go"
patches="$root/patches"
series="$patches/series"

pin() { awk -v k="$1" '$1 == k { print $2 }' "$root/upstream/PIN"; }
module=$(pin module)
version=$(pin version)
hash=$(pin h1)
kfake_module=$(pin kfake-module)
kfake_version=$(pin kfake-version)
kfake_hash=$(pin kfake-h1)

die() { printf 'patchset: %s\n' "$*" >&2; exit 1; }
say() { printf 'patchset: %s\n' "$*" >&2; }

# Identity and dates for the commits we make, so that the base commit hash is
# reproducible. Patches keep their own author and date (git am -k uses the
# patch headers); only the committer is ours.
export GIT_COMMITTER_NAME=patchset GIT_COMMITTER_EMAIL=patchset@localhost
export GIT_COMMITTER_DATE='2000-01-01T00:00:00Z'

# git with the user's and the system's configuration ignored and every
# setting that changes format-patch or am output pinned, so that nobody's
# ~/.gitconfig can change the exported bytes.
g() {
	GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 git \
		-c core.abbrev=12 -c core.autocrlf=false -c core.quotepath=true \
		-c diff.renames=true -c diff.algorithm=myers \
		-c init.defaultBranch=main -c user.name=patchset -c user.email=patchset@localhost \
		-c advice.detachedHead=false "$@"
}

# series_names prints the patch file names of patches/series in order,
# skipping blank lines and comments.
series_names() {
	[ -f "$series" ] || return 0
	grep -v -E '^[[:space:]]*(#|$)' "$series" | sed -e 's/[[:space:]]*$//'
}

# download DESTVAR MODULE VERSION HASH [GOMODCACHE]: go mod download a pinned
# module, check its hash, and set DESTVAR to its extracted directory.
download() {
	local -n _dir=$1
	local mod=$2 ver=$3 want=$4 cache=${5:-}
	local json
	local env=(GOFLAGS= GOWORK=off)
	[ -n "$cache" ] && env+=("GOMODCACHE=$cache")
	# Run outside any module, so that no go.mod or go.sum is read or written.
	json=$(cd / && env "${env[@]}" go mod download -json "$mod@$ver") ||
		die "go mod download $mod@$ver failed: $json"
	local got moddir
	got=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Sum": "\(.*\)",\{0,1\}$/\1/p')
	moddir=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
	[ -n "$moddir" ] && [ -d "$moddir" ] || die "go mod download did not report a directory for $mod@$ver"
	[ "$got" = "$want" ] || die "hash mismatch for $mod@$ver: the proxy served $got, upstream/PIN says $want"
	_dir=$moddir
}

# download_all DESTVAR KFAKEVAR [GOMODCACHE]: download franz-go and kfake.
download_all() {
	local -n _fdir=$1 _kdir=$2
	local d k
	download d "$module" "$version" "$hash" "${3:-}"
	download k "$kfake_module" "$kfake_version" "$kfake_hash" "${3:-}"
	_fdir=$d _kdir=$k
}

# materialize SRC KFAKESRC DEST [NPATCHES]: copy the module into DEST and
# kfake into DEST/pkg/kfake, make it a git repo with one deterministic base
# commit tagged upstream-base, then git am the series (only its first
# NPATCHES patches, if given).
materialize() {
	local src=$1 ksrc=$2 dest=$3 max=${4:--1}
	rm -rf "$dest"
	mkdir -p "$dest"
	cp -R "$src/." "$dest/"
	[ ! -e "$dest/pkg/kfake" ] || die "$module $version already holds pkg/kfake"
	mkdir -p "$dest/pkg/kfake"
	cp -R "$ksrc/." "$dest/pkg/kfake/"
	chmod -R u+w "$dest"
	(
		cd "$dest"
		g init -q
		printf '%s\n' '# Written by upstream/patchset.sh; the materialized module is pristine.' >.git/info/exclude
		g add -A
		GIT_AUTHOR_NAME=upstream GIT_AUTHOR_EMAIL=upstream@localhost \
			GIT_AUTHOR_DATE='2000-01-01T00:00:00Z' \
			g commit -q --no-verify -m "$module $version" -m "Pristine modules as served by the Go module proxy: $module $version ($hash), and $kfake_module $kfake_version ($kfake_hash) in pkg/kfake."
		g tag upstream-base
		local name n=0
		while IFS= read -r name; do
			[ "$max" -ge 0 ] && [ "$n" -ge "$max" ] && break
			n=$((n + 1))
			[ -f "$patches/$name" ] || die "patches/series names $name, but patches/$name does not exist"
			if ! g am -q -k --no-3way --whitespace=nowarn "$patches/$name" >/tmp/patchset-am.$$ 2>&1; then
				cat /tmp/patchset-am.$$ >&2
				rm -f /tmp/patchset-am.$$
				g am --abort >/dev/null 2>&1 || true
				die "patch $n, patches/$name, does not apply cleanly to $module $version (zero fuzz).
  If upstream/franz-go holds the intended commits, regenerate the series with:
      make patches-export && git add patches
  If patches/$name was edited by hand, restore it with:
      git checkout -- patches/$name"
			fi
			rm -f /tmp/patchset-am.$$
		done < <(series_names)
	)
}

# export_to DIR TREE: write the series of TREE (upstream-base..HEAD) into DIR.
export_to() {
	local out=$1 src=$2
	local tmp
	tmp=$(mktemp -d)
	(cd "$src" && g format-patch -q -k --zero-commit --full-index --no-signature --no-stat \
		--no-numbered --no-cover-letter --no-thread --no-color --encode-email-headers --filename-max-length=72 \
		-o "$tmp" upstream-base..HEAD >/dev/null)
	mkdir -p "$out"
	rm -f "$out"/*.patch
	: >"$out/series.new"
	local f name
	for f in "$tmp"/*.patch; do
		[ -e "$f" ] || continue
		# Drop format-patch's 0001- prefix: the order lives in series, so that
		# inserting a patch does not rename every later one.
		name=${f##*/}
		name=${name#[0-9][0-9][0-9][0-9]-}
		[ -e "$out/$name" ] && die "two patches would be named $name; give one a different subject"
		mv "$f" "$out/$name"
		printf '%s\n' "$name" >>"$out/series.new"
	done
	{
		printf '%s\n' "# The patch series, applied in this order by 'make patches-apply'."
		printf '%s\n' "# Generated by 'make patches-export' from upstream/franz-go; do not edit by hand."
		cat "$out/series.new"
	} >"$out/series"
	rm -f "$out/series.new"
	rm -rf "$tmp"
}

# tree_state prints why upstream/franz-go may not be thrown away, or nothing.
tree_state() {
	[ -d "$tree" ] || return 0
	[ -d "$tree/.git" ] || { echo "upstream/franz-go exists but is not a git repo"; return 0; }
	(cd "$tree" && g rev-parse -q --verify upstream-base >/dev/null) ||
		{ echo "upstream/franz-go has no upstream-base tag"; return 0; }
	if [ -n "$(cd "$tree" && g status --porcelain)" ]; then
		echo "upstream/franz-go has uncommitted edits:"
		(cd "$tree" && g status --short | sed 's/^/      /')
		return 0
	fi
	local tmp
	tmp=$(mktemp -d)
	export_to "$tmp" "$tree"
	if ! diff -r -q "$patches" "$tmp" >/dev/null 2>&1; then
		echo "upstream/franz-go has commits that differ from patches/ (unexported work):"
		diff -r -q "$patches" "$tmp" 2>&1 | sed -e "s#$tmp#(tree)#" -e "s#$root/##" -e 's/^/      /'
	fi
	rm -rf "$tmp"
}

cmd_apply() {
	local force=${1:-}
	local why
	why=$(tree_state)
	if [ -n "$why" ] && [ "$force" != --force ]; then
		die "refusing to reset upstream/franz-go: $why
  To keep the work: commit it in upstream/franz-go, then run
      make patches-export && git add patches
  To throw it away and rebuild from patches/:
      make patches-apply FORCE=1"
	fi
	local dir kdir
	download_all dir kdir
	materialize "$dir" "$kdir" "$tree"
	say "upstream/franz-go is $module $version (with kfake $kfake_version) + $(series_names | wc -l) patches (base $(cd "$tree" && git rev-parse --short=12 upstream-base))"
}

cmd_export() {
	[ -d "$tree/.git" ] || die "upstream/franz-go is not materialized; run: make patches-apply"
	if [ -n "$(cd "$tree" && g status --porcelain)" ]; then
		die "upstream/franz-go has uncommitted edits; commit them there first (git -C upstream/franz-go commit), then run make patches-export"
	fi
	export_to "$patches" "$tree"
	say "exported $(series_names | wc -l) patches to patches/"
}

cmd_check() {
	local rc=0 why
	why=$(tree_state)
	if [ -n "$why" ]; then
		say "DRIFT: $why"
		say "fix: make patches-export && git add patches"
		rc=1
	fi
	local tmp
	tmp=$(mktemp -d)
	# shellcheck disable=SC2064
	trap "chmod -R u+w '$tmp' 2>/dev/null; rm -rf '$tmp'" EXIT
	local dir kdir
	# A throwaway module cache: the modules really come from the proxy, and
	# their hashes are checked against the pin, not against a cached copy.
	download_all dir kdir "$tmp/modcache"
	if ! (materialize "$dir" "$kdir" "$tmp/franz-go"); then
		exit 1
	fi
	export_to "$tmp/patches" "$tmp/franz-go"
	if ! git -C "$root" diff --no-index --exit-code --stat -- "$patches" "$tmp/patches" >&2; then
		git -C "$root" diff --no-index -- "$patches" "$tmp/patches" >&2 | head -50 || true
		say "DRIFT: patches/ is not what a fresh apply + export of it produces (a hand edit or a non-canonical export)."
		say "fix: make patches-apply FORCE=1 && make patches-export && git add patches"
		rc=1
	fi
	[ $rc = 0 ] && say "ok: $(series_names | wc -l) patches apply to $module $version and re-export byte for byte"
	return $rc
}

# cmd_pristine DEST: materialize pristine upstream (no patches) into
# DEST/franz-go, and write DEST/go.work using this repository, that tree and
# its pkg/kfake,
# for tests that must fail on pristine upstream (GOWORK=DEST/go.work).
cmd_pristine() {
	[ -n "${1:-}" ] || die "usage: patchset.sh pristine DEST"
	local dir kdir
	download_all dir kdir
	materialize "$dir" "$kdir" "$1/franz-go" 0
	cat >"$1/go.work" <<EOW
go 1.26.0

use (
	$root
	$1/franz-go
	$1/franz-go/pkg/kfake
)
EOW
	say "$1/franz-go is pristine $module $version (with kfake $kfake_version); use GOWORK=$1/go.work"
}

case "${1:-}" in
apply) shift; cmd_apply "$@" ;;
pristine) shift; cmd_pristine "$@" ;;
export) cmd_export ;;
check) cmd_check ;;
base) cd "$tree" && git rev-parse upstream-base ;;
*) die "usage: patchset.sh apply [--force] | export | check | pristine DEST | base" ;;
esac
