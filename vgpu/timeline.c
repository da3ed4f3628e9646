/* timeline.c - see timeline.h. */
#include "timeline.h"
#include "ledger.h"

static struct vgpu_ledger_timeline *timeline(const struct vgpu_ledger *l)
{
	return (struct vgpu_ledger_timeline *)((char *)vgpu_ledger_header(l) +
					       VGPU_LEDGER_TIMELINE_OFFSET);
}

void vgpu_timeline_record(struct vgpu_ledger *l, uint64_t end_ns)
{
	struct vgpu_ledger_timeline *t = timeline(l);
	uint64_t i = __atomic_fetch_add(&t->head, 1, __ATOMIC_RELAXED);

	__atomic_store_n(&t->end_ns[i % VGPU_LEDGER_TIMELINE_ENTRIES], end_ns,
			 __ATOMIC_RELEASE);
}

uint64_t vgpu_timeline_exclusive(const struct vgpu_ledger *l,
				 uint64_t start_ns, uint64_t end_ns)
{
	const struct vgpu_ledger_timeline *t = timeline(l);
	uint64_t from = start_ns;

	for (unsigned i = 0; i < VGPU_LEDGER_TIMELINE_ENTRIES; i++) {
		uint64_t e = __atomic_load_n(&t->end_ns[i], __ATOMIC_ACQUIRE);
		if (e > from && e < end_ns)
			from = e;
	}
	return end_ns > from ? end_ns - from : 0;
}
