#!/usr/bin/env python3
"""Checks that the simulator exports exactly the entry points of entries.def.

Usage: check_exports.py NM LIBCUDA ENTRIES_DEF

Programs using the CUDA runtime reach the driver only through
cuGetProcAddress, whose table is entries.def: an exported cu* function
missing from it is invisible to them, and an entry with no export would
not link. Exits 1 and lists the differences when the two sets differ.
"""
import re
import subprocess
import sys


def exported(nm, lib):
    out = subprocess.run([nm, "-D", "--defined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[1] == "T" and fields[2].startswith("cu"):
            names.add(fields[2])
    return names


def listed(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    entry = re.compile(r"^VSIM_ENTRY\(\s*\w+\s*,\s*\d+\s*,\s*(\w+)\s*,", re.M)
    return set(entry.findall(text))


def main():
    nm, lib, entries_def = sys.argv[1:4]
    have, want = exported(nm, lib), listed(entries_def)
    if not want:
        sys.exit("check_exports.py: no VSIM_ENTRY lines in " + entries_def)
    rc = 0
    for name in sorted(have - want):
        print("exported but not in entries.def:", name)
        rc = 1
    for name in sorted(want - have):
        print("in entries.def but not exported:", name)
        rc = 1
    if rc == 0:
        print("%d entry points, all exported and all in entries.def"
              % len(have))
    return rc


sys.exit(main())
