/* bus.c - the bus between the device and host memory, as kernels see it.
 *
 * A kernel's host form reports each pass it makes over a buffer
 * (vgpu_kernel_launch.touched). Bytes that lie in host-backed memory cross
 * the bus: a mapping of a host-located VMM handle, managed memory that is
 * on the host (managed.c says when), and page-locked host memory
 * (cuMemAllocHost, cuMemHostAlloc, cuMemHostRegister) used through its
 * device pointer. They cost bytes / VGPU_SIM_BUS_BANDWIDTH, which the
 * kernel waits out after its host form returns, on top of its own time.
 * Device memory costs nothing beyond the host form's own time (a GPU's
 * memory is some hundred times faster than its bus), nor does memory the
 * driver does not know. Copies and memsets are not charged.
 *
 * The count is per worker thread: a worker runs one kernel at a time.
 */
#include "sim.h"

static _Thread_local uint64_t host_bytes;

/* The piece of [p, p+len) from p that lies in one allocation or mapping:
 * its length, and whether it is host-backed; 0 when p is in no memory the
 * driver knows. */
static uint64_t piece(uintptr_t p, uint64_t len, bool *host)
{
	struct vsim_alloc a;
	uint64_t n = vsim_vmm_span(p, len, host);

	if (n)
		return n;
	if (!vsim_mem_lookup(p, 1, &a))
		return 0;
	n = a.size - (p - a.base);
	*host = a.kind == VSIM_MEM_HOST ||
		((a.flags & VSIM_ALLOC_MANAGED) && vsim_managed_on_host(&a));
	return n < len ? n : len;
}

uint64_t vsim_bus_host_bytes(uintptr_t p, uint64_t len)
{
	uint64_t total = 0, n;
	bool host = false;

	if (len > UINTPTR_MAX - p)
		len = UINTPTR_MAX - p;
	for (; len; p += n, len -= n) {
		n = piece(p, len, &host);
		if (!n)
			break;
		if (host)
			total += n;
	}
	return total;
}

void vsim_bus_touched(const void *ptr, uint64_t bytes)
{
	host_bytes += vsim_bus_host_bytes((uintptr_t)ptr, bytes);
}

uint64_t vsim_bus_ns(uint64_t bytes, uint64_t bandwidth)
{
	double ns;

	if (!bandwidth || !bytes)
		return 0;
	ns = (double)bytes * 1e9 / (double)bandwidth;
	return ns < 1e18 ? (uint64_t)ns : 1000000000000000000ull;
}

void vsim_bus_begin(void)
{
	host_bytes = 0;
}

uint64_t vsim_bus_end(void)
{
	uint64_t ns = vsim_bus_ns(host_bytes, vsim_g.cfg.bus_bandwidth);

	host_bytes = 0;
	return ns;
}
