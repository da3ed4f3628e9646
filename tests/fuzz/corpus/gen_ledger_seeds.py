#!/usr/bin/env python3
"""Writes the seeds of fuzz_ledger (see the input format in fuzz_ledger.c).

Byte 0: mode (0 raw file, 1 header overlay, 2 patches), byte 1: operations
(0x01 reclaim, 0x02 join, 0x04 second joiner, 0x08 limited, high nibble:
usage kind). Offsets follow include/vgpu.h (version 3). Run from anywhere;
the seeds go next to this script, in fuzz_ledger/.
"""
import os
import struct

FILE_SIZE = 397312
SHARES = 331776
TENANTS = 4096
TENANT_SIZE = 512
SLOTS = TENANTS + 128 * TENANT_SIZE
SLOT_SIZE = 256
UUID = b"GPU-fuzz-0"


def header(version=3):
    h = struct.pack("<8sIIQQQIIIIIIII Q", b"VGPULEDG", version, 512,
                    FILE_SIZE, 80 << 30, 0, 128, 1024, TENANT_SIZE,
                    SLOT_SIZE, TENANTS, SLOTS, 9, 16, 0)
    h += UUID.ljust(64, b"\0")
    h += struct.pack("<IIII", SHARES, 511, 128, 8)
    return h.ljust(512, b"\0")


def patch(off, data):
    return struct.pack("<IB", off, len(data)) + data


def tenant(i, field_off, data):
    return patch(TENANTS + i * TENANT_SIZE + field_off, data)


def slot(i, field_off, data):
    return patch(SLOTS + i * SLOT_SIZE + field_off, data)


def owner(index, gen):
    return struct.pack("<I", (index + 1) | (gen << 11))


u32 = lambda v: struct.pack("<I", v)
u64 = lambda v: struct.pack("<Q", v)


def name_hash(name):
    """A tenant record's key when ready: FNV-1a of the name, never 0."""
    h = 2166136261
    for c in name:
        h = ((h ^ c) * 16777619) & 0xffffffff
    return h or 1


def key_busy(index, gen, name):
    """A record being made by the process of slot (index, gen)."""
    return ((index + 1) | (gen << 11)) << 32 | name_hash(name)


seeds = {
    "valid_join": b"\x02\x02",
    "valid_all_ops": b"\x02\x3f",
    "header_overlay": b"\x01\x0f" + header(),
    "header_version2": b"\x01\x02" + header(2),
    "raw_header_only": b"\x00\x02" + header(),
    "raw_empty": b"\x00\x02",
    # tenant 0 "fuzz", limited, with usage held by a dead slot 0, its lock
    # word naming slot 0 (dead: nobody holds its OFD lock)
    "dead_owner": b"\x02\x1b" +
        tenant(0, 0, owner(0, 2) + u32(1) + u64(1 << 20) + u64(4096)) +
        tenant(0, 56, u64(name_hash(b"fuzz"))) +
        tenant(0, 64, b"fuzz\0") + tenant(0, 128 + 8, u64(4096)) +
        slot(0, 0, u32(1) + u32(0) + u32(2) + u32(1)) +
        slot(0, 64 + 8, u64(4096)),
    # tenant 0 "fuzz" being made by slot 3, which died making it (its
    # slot published, nothing held); tenant 1 being made for another name
    # by a dead slot 4
    "dead_maker": b"\x02\x07" +
        tenant(0, 56, u64(key_busy(3, 5, b"fuzz"))) +
        tenant(0, 64, b"fuzz\0") +
        slot(3, 0, u32(1) + u32(0) + u32(5) + u32(1)) +
        tenant(1, 56, u64(key_busy(4, 1, b"other"))),
    # slots naming tenants out of range, a tenant name without its NUL,
    # a garbage lock word
    "bad_records": b"\x02\x07" +
        tenant(1, 0, u32(0xffffffff) + u32(1)) +
        tenant(1, 64, b"o" * 64) +
        slot(1, 0, u32(1) + u32(200) + u32(7)) +
        slot(2, 0, u32(1) + u32(1) + u32(0xfffff)),
}

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_ledger")
os.makedirs(out, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
