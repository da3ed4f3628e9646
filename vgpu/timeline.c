/* timeline.c - see timeline.h. */
#include "timeline.h"
#include "ledger.h"
#include "throttle.h"

static struct vgpu_ledger_timeline *timeline(const struct vgpu_ledger *l)
{
	return (struct vgpu_ledger_timeline *)((char *)vgpu_ledger_header(l) +
					       VGPU_LEDGER_TIMELINE_OFFSET);
}

/* A newest end more than the throttle's clock skew ahead of one recorded
 * now is from another boot (a ledger file kept on disk): replaced, not
 * counted against. */
#define SKEW_NS VGPU_THROTTLE_CLOCK_SKEW_NS

void vgpu_timeline_record(struct vgpu_ledger *l, uint64_t end_ns)
{
	struct vgpu_ledger_timeline *t = timeline(l);
	uint64_t i = __atomic_fetch_add(&t->head, 1, __ATOMIC_RELAXED), n;

	__atomic_store_n(&t->end_ns[i % VGPU_LEDGER_TIMELINE_ENTRIES], end_ns,
			 __ATOMIC_RELEASE);
	/* After the end's store, both ways: a reader that raised the newest
	 * end after this one (acquire) or sees the count sees this end. */
	n = __atomic_load_n(&t->newest_ns, __ATOMIC_ACQUIRE);
	while ((n < end_ns || n > end_ns + SKEW_NS) &&
	       !__atomic_compare_exchange_n(&t->newest_ns, &n, end_ns, false,
					    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		;
	if (end_ns < n && n <= end_ns + SKEW_NS)
		__atomic_fetch_add(&t->late, 1, __ATOMIC_RELEASE);
}

uint64_t vgpu_timeline_late(const struct vgpu_ledger *l)
{
	return __atomic_load_n(&timeline(l)->late, __ATOMIC_ACQUIRE);
}

/* Ends are appended roughly in time order (processes record them a few
 * milliseconds late at most), so the scan runs back from the newest and
 * stops after a run of ends before the interval's start. */
#define OLDER_RUN 8

/* An end this little after an interval's start does not cut it: launches
 * are placed on the host's clock from the driver's elapsed times, floats
 * of milliseconds from a reference up to 4 s old (a quarter of a
 * microsecond apart at 4 s), so a kernel queued right behind another on
 * one stream may be placed to start a few hundred ns before that one's
 * end, and was cut by it: 63 kernels of 20 us were charged 1.3 us less
 * than they ran (a CI run). */
#define SLACK_NS 1000u

uint64_t vgpu_timeline_exclusive(const struct vgpu_ledger *l,
				 uint64_t start_ns, uint64_t end_ns)
{
	const struct vgpu_ledger_timeline *t = timeline(l);
	uint64_t head = __atomic_load_n(&t->head, __ATOMIC_ACQUIRE);
	uint64_t n = head < VGPU_LEDGER_TIMELINE_ENTRIES
			     ? head : VGPU_LEDGER_TIMELINE_ENTRIES;
	uint64_t from = start_ns;
	unsigned older = 0;

	for (uint64_t i = 1; i <= n && older < OLDER_RUN; i++) {
		uint64_t e = __atomic_load_n(
			&t->end_ns[(head - i) % VGPU_LEDGER_TIMELINE_ENTRIES],
			__ATOMIC_ACQUIRE);
		if (e <= start_ns + SLACK_NS) {
			older++;
			continue;
		}
		older = 0;
		if (e > from && e < end_ns)
			from = e;
	}
	return end_ns > from ? end_ns - from : 0;
}

uint64_t vgpu_timeline_record_own(struct vgpu_ledger *l, uint64_t start_ns,
				  uint64_t end_ns)
{
	uint64_t newest = __atomic_load_n(&timeline(l)->newest_ns,
					  __ATOMIC_ACQUIRE);

	vgpu_timeline_record(l, end_ns);
	if (newest <= start_ns + SLACK_NS && end_ns >= start_ns)
		return end_ns - start_ns;
	return vgpu_timeline_exclusive(l, start_ns, end_ns);
}
