#!/usr/bin/env python3
"""The version script of libvgpu-hip.so from hooks.def: each hook exported
under the HIP runtime's node (a program's hipMalloc@hip_4.2 binds to it),
the nodes chained oldest first as libamdhip64.so.5 has them, all else
local. Besides the hooks: ROCm SMI's memory queries (unversioned in
librocm_smi64.so.1: a program's unversioned reference binds to the
default version), dlsym under glibc's nodes (smi.c, dlsym.S), and the
signal functions that keep the ledger's SIGBUS guard (sigkeep.c)."""
import re
import sys

hooks = {}
nodes = set()
for line in open(sys.argv[1]):
    m = re.match(r'VGPU_HIP_(HOOK|HOOK_CXX|CALL)\((hip_[0-9.]+),\s*(\w+),'
                 r'(?:\s*(\w+),)?', line)
    if not m:
        continue
    nodes.add(m.group(2))
    if m.group(1) != 'CALL':
        # HOOK_CXX: exported under its C++ symbol, not its C name.
        name = m.group(4) if m.group(1) == 'HOOK_CXX' else m.group(3)
        hooks.setdefault(m.group(2), []).append(name)
order = sorted(nodes | {'hip_4.2'}, key=lambda n: [int(x) for x in n[4:].split('.')])
with open(sys.argv[2], 'w') as out:
    prev = None
    for i, node in enumerate(order):
        out.write(node + ' {\n')
        names = hooks.get(node, [])
        if names or i == 0:
            out.write('  global:\n')
            for n in names:
                out.write('    %s;\n' % n)
            if i == 0:
                out.write('    vgpu_hip_shim_version;\n')
                out.write('    rsmi_dev_memory_total_get;\n')
                out.write('    rsmi_dev_memory_usage_get;\n')
        if i == 0:
            out.write('  local:\n    *;\n')
        out.write('}%s;\n' % (' ' + prev if prev else ''))
        prev = node
    # dlsym.S's dlsym@GLIBC_2.2.5 and dlsym@@GLIBC_2.34; sigkeep.c's
    # signal functions under the versions programs bind them with.
    out.write('GLIBC_2.2.5 {\n  global:\n    sigaction;\n    signal;\n'
              '    sigprocmask;\n    bsd_signal;\n    ssignal;\n'
              '    sysv_signal;\n    __sysv_signal;\n};\n')
    out.write('GLIBC_2.32 {\n  global:\n    pthread_sigmask;\n'
              '} GLIBC_2.2.5;\n')
    out.write('GLIBC_2.34 {\n  global:\n    dlsym;\n} GLIBC_2.32;\n')
