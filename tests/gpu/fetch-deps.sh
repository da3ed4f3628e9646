#!/usr/bin/env bash
# tests/gpu/fetch-deps.sh - run on a machine with Debian's package archive:
# downloads the header-only packages a GPU machine without apt lacks and
# unpacks them into .deps/, which tests/gpu/check.sh adds to the include path.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .deps/pkg
(cd .deps/pkg && apt-get download uthash-dev >/dev/null)
for deb in .deps/pkg/*.deb; do
	dpkg -x "$deb" .deps
done
echo "fetch-deps: unpacked into .deps/: $(ls .deps/usr/include | tr '\n' ' ')"
