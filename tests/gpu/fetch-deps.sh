#!/usr/bin/env bash
# tests/gpu/fetch-deps.sh - run on a machine with Debian's package archive:
# downloads the build dependencies a GPU machine without apt lacks (libelf
# for the shim's generator) and unpacks them into .deps/, which
# tests/gpu/check.sh adds to the include, library and pkg-config paths.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .deps/pkg
(cd .deps/pkg && apt-get download libelf-dev libelf1 >/dev/null)
for deb in .deps/pkg/*.deb; do
	dpkg -x "$deb" .deps
done
echo "fetch-deps: unpacked into .deps/: $(ls .deps/usr/include | tr '\n' ' ')"
