#!/usr/bin/env bash
# tests/gpu/shim_trace.sh SHIM - which driver entry points the real CUDA
# runtime (through PyTorch) asks the shim for, and who answered each: the
# shim's hook, the driver's own function, or nobody. Needs VGPU_LOG_LEVEL
# debug's "cuGetProcAddress NAME VERSION FLAGS -> WHO" lines.
set -u
shim=$1
log=$(mktemp)
LD_PRELOAD=$shim VGPU_LOG_LEVEL=debug VGPU_MEMORY_LIMIT=4GiB \
	python3 -c 'import torch; x = torch.ones(1 << 20, device="cuda"); torch.cuda.synchronize(); print("sum", x.sum().item())' \
	>"$log" 2>&1
rc=$?
grep -c "cuGetProcAddress .* -> " "$log" | sed 's/^/requests: /'
for who in hook driver "not found"; do
	printf '%s: %s\n' "$who" "$(grep -c -- "-> $who\$" "$log")"
done
echo "hooks handed out:"
grep -- "-> hook$" "$log" | awk '{print "  " $3 "@" $4 "/" $5}' | sort -u
grep -v "cuGetProcAddress" "$log" | tail -5
rm -f "$log"
exit $rc
