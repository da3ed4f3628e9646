#!/usr/bin/env python3
"""Check the kernels' parameter layouts that nvcc produced.

usage: kparams.py FATBIN_OR_CUBIN...

For every cubin (a fatbin's ELF entries, or a cubin file) reads each
kernel's .nv.info.<kernel> section: the KPARAM_INFO records (ordinal,
offset, size) and CBANK_PARAM_SIZE (the buffer size), and compares them
with EXPECTED, which must agree with the offsets host.c reads. With -v,
prints every layout found.
"""
import struct
import sys

from embed import fatbin_entries, KIND_ELF

# kernel: (buffer size, [(offset, size) per parameter, in order])
EXPECTED = {
    'vgpu_spin': (16, [(0, 8), (8, 8)]),
    'vgpu_touch': (32, [(0, 8), (8, 8), (16, 4), (20, 4), (24, 8)]),
    'vgpu_saxpy': (32, [(0, 8), (8, 4), (16, 8), (24, 8)]),
}

EIFMT_SVAL = 0x04
EIATTR_KPARAM_INFO = 0x17
EIATTR_CBANK_PARAM_SIZE = 0x19


def elf_sections(elf):
    """Return {name: bytes} for the sections of a 64-bit ELF image."""
    shoff, = struct.unpack_from('<Q', elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', elf, 0x3a)
    heads = [struct.unpack_from('<IIQQQQ', elf, shoff + i * shentsize)
             for i in range(shnum)]
    stroff = heads[shstrndx][4]
    out = {}
    for name, _type, _flags, _addr, off, size in heads:
        end = elf.index(b'\0', stroff + name)
        out[elf[stroff + name:end].decode()] = elf[off:off + size]
    return out


def nv_info_layout(info):
    """(buffer size, sorted [(offset, size)]) from one .nv.info.<k>."""
    params, total, off = {}, None, 0
    while off + 4 <= len(info):
        fmt, attr, val = struct.unpack_from('<BBH', info, off)
        off += 4
        if fmt != EIFMT_SVAL:
            if attr == EIATTR_CBANK_PARAM_SIZE:
                total = val
            continue
        if attr == EIATTR_KPARAM_INFO:
            _index, ordinal, poff, bits = struct.unpack_from(
                '<IHHI', info, off)
            params[ordinal] = (poff, (bits >> 18) & 0x3fff)
        off += val
    return total, [params[k] for k in sorted(params)]


def cubins(path):
    with open(path, 'rb') as f:
        data = f.read()
    if data.startswith(b'\x7fELF'):
        return [data]
    return [p for kind, _f, _u, p in fatbin_entries(data) if kind == KIND_ELF]


def check(path, verbose):
    bad = 0
    for n, elf in enumerate(cubins(path)):
        secs = elf_sections(elf)
        for kernel, want in EXPECTED.items():
            got = nv_info_layout(secs.get('.nv.info.' + kernel, b''))
            if verbose:
                print('%s[%d] %s: %s' % (path, n, kernel, got))
            if got != want:
                print('%s[%d] %s: layout %s, expected %s' %
                      (path, n, kernel, got, want))
                bad += 1
    return bad


def main(argv):
    verbose = '-v' in argv
    paths = [a for a in argv[1:] if a != '-v']
    if not paths:
        sys.stderr.write('usage: kparams.py [-v] FATBIN_OR_CUBIN...\n')
        return 2
    bad = sum(check(p, verbose) for p in paths)
    print('kparams: %s' % ('FAIL' if bad else 'layouts match host.c'))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
