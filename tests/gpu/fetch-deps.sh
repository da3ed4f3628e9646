#!/usr/bin/env bash
# tests/gpu/fetch-deps.sh - run on a machine with Debian's package archive:
# downloads the build dependencies a GPU machine without apt lacks (libelf
# for the shim's generator, libmicrohttpd for vgpu-top --listen) and unpacks
# them into .deps/, which tests/gpu/check.sh adds to the include, library
# and pkg-config paths.
#
# libmicrohttpd12 needs libgnutls30, which every Debian or Ubuntu base has
# (apt needs it) and which is not downloaded: a second copy first in
# LD_LIBRARY_PATH would replace the machine's own for every program the
# check runs. The .pc files name private requirements (libelf: zlib;
# libmicrohttpd: gnutls) that only a static link needs, and pkg-config
# refuses a package's --cflags when their .pc is missing: the lines are
# taken out of the unpacked copies.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .deps/pkg
(cd .deps/pkg && apt-get download libelf-dev libelf1 libmicrohttpd-dev \
	libmicrohttpd12 >/dev/null)
for deb in .deps/pkg/*.deb; do
	dpkg -x "$deb" .deps
done
sed -i '/^Requires.private:/d' .deps/usr/lib/*/pkgconfig/*.pc
echo "fetch-deps: unpacked into .deps/: $(ls .deps/usr/include | tr '\n' ' ')"
