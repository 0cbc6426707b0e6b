#!/bin/sh
# refresh.sh replaces the chat page's third-party scripts with released
# files from the npm registry, unchanged, and records where they came from.
#
#   web/vendor/refresh.sh           fetch the versions pinned below again
#   web/vendor/refresh.sh latest    fetch the newest releases (then commit,
#                                   after the browser tests pass)
#
# It needs npm (which checks each tarball against the registry's integrity
# hash). It writes the three scripts (markdown-it, DOMPurify and
# highlight.js's prebuilt browser build with its common languages), their
# licences (and those of the packages markdown-it's browser build bundles)
# and VERSIONS, whose sha256 sums web's tests check the embedded files
# against, and whose versions they check are the ones pinned here.
set -eu

MARKDOWN_IT=15.0.3
DOMPURIFY=3.5.0
HIGHLIGHT_JS=11.12.0
if [ "${1:-}" = latest ]; then
	MARKDOWN_IT=$(npm view markdown-it version)
	DOMPURIFY=$(npm view dompurify version)
	HIGHLIGHT_JS=$(npm view @highlightjs/cdn-assets version)
fi

here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# unpack SPEC fetches a package tarball into $tmp/NAME and prints its
# resolved name@version.
unpack() {
	tgz=$(cd "$tmp" && npm pack --silent "$1" | tail -n 1)
	dir="$tmp/${tgz%.tgz}"
	mkdir -p "$dir"
	tar -xzf "$tmp/$tgz" -C "$dir"
	echo "$dir/package"
}

# ship copies FILE of a package to the vendor directory as NAME and
# appends its line to VERSIONS.
ship() { # pkgdir spec file name
	cp "$1/$3" "$here/$4"
	sum=$(sha256sum "$here/$4" | cut -d' ' -f1)
	printf '%s %s %s %s %s\n' "$4" "$sum" "$2" "$3" "$(npm view "$2" dist.integrity)" >>"$tmp/VERSIONS"
}

printf '# file sha256 package@version path-in-package tarball-integrity\n' >"$tmp/VERSIONS"
printf '# Written by refresh.sh from the npm registry; do not edit.\n' >>"$tmp/VERSIONS"

md=$(unpack "markdown-it@$MARKDOWN_IT")
ship "$md" "markdown-it@$MARKDOWN_IT" dist/browser/markdown-it.umd.min.js markdown-it.min.js
purify=$(unpack "dompurify@$DOMPURIFY")
ship "$purify" "dompurify@$DOMPURIFY" dist/purify.min.js purify.min.js
# @highlightjs/cdn-assets is highlight.js's own prebuilt browser build:
# highlight.min.js defines the global hljs with its common languages.
hl=$(unpack "@highlightjs/cdn-assets@$HIGHLIGHT_JS")
ship "$hl" "@highlightjs/cdn-assets@$HIGHLIGHT_JS" highlight.min.js highlight.min.js

rm -rf "$here/licenses"
mkdir -p "$here/licenses"
cp "$md/LICENSE" "$here/licenses/markdown-it.txt"
cp "$purify/LICENSE" "$here/licenses/dompurify-Apache-2.0.txt"
cp "$purify/LICENSE-MPL" "$here/licenses/dompurify-MPL-2.0.txt"
# A scoped package's licence is named without its @ and with - for /.
cp "$hl/LICENSE" "$here/licenses/highlightjs-cdn-assets.txt"
# markdown-it's browser build bundles its runtime dependencies (argparse
# only serves its command line): their licences ship too, at the newest
# versions its ranges allow, as the build resolves them.
for dep in entities linkify-it mdurl punycode.js uc.micro; do
	range=$(node -e 'const p=require(process.argv[1]);process.stdout.write(p.dependencies[process.argv[2]])' "$md/package.json" "$dep")
	d=$(unpack "$dep@$range")
	version=$(node -e 'process.stdout.write(require(process.argv[1]).version)' "$d/package.json")
	for f in LICENSE LICENSE.md LICENSE.txt LICENSE-MIT.txt license; do
		if [ -f "$d/$f" ]; then
			cp "$d/$f" "$here/licenses/$dep.txt"
			break
		fi
	done
	[ -f "$here/licenses/$dep.txt" ] || { echo "refresh.sh: no licence file in $dep@$version" >&2; exit 1; }
	printf '# bundled in markdown-it.min.js: %s@%s (licenses/%s.txt)\n' "$dep" "$version" "$dep" >>"$tmp/VERSIONS"
done

mv "$tmp/VERSIONS" "$here/VERSIONS"
cat "$here/VERSIONS"
