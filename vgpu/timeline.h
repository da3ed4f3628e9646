/* timeline.h - which part of a measured launch interval was the launch's
 * own GPU time.
 *
 * A launch's GPU time is measured by events around it on its stream, but
 * the interval between them also holds whatever the GPU ran for other
 * contexts meanwhile (one context runs at a time). Every process records
 * the end of each launch it measures in the GPU's timeline (in the ledger);
 * a launch is then charged only for the part of [start, end] after the
 * latest end recorded before its own: the time it ran, not the time it
 * waited. Times are CLOCK_MONOTONIC ns. Lock-free; a call reads the
 * recent end of the timeline (back to a run of ends before its start).
 */
#ifndef VGPU_TIMELINE_H
#define VGPU_TIMELINE_H

#include <stdint.h>

struct vgpu_ledger;

/* Records that a launch on this GPU ended at end_ns. One recorded after a
 * later end (its process read it later than another process read a later
 * one) is counted late. */
void vgpu_timeline_record(struct vgpu_ledger *l, uint64_t end_ns);

/* The count of ends recorded late so far. A reading of the part of
 * [start, end] after the latest end before `end`, made after `end` itself
 * was recorded, stays true while this count has not changed: any end
 * recorded since is later than `end`. So a launch read once is not read
 * again at its charge (the scan ran back over every end recorded in the
 * 20 ms since). Acquire: the ends of the late counted are seen. */
uint64_t vgpu_timeline_late(const struct vgpu_ledger *l);

/* The part of [start_ns, end_ns] after the latest recorded end before
 * end_ns (its own end excluded); an end within 1 us of start_ns does not
 * cut it (the placing's error: timeline.c). */
uint64_t vgpu_timeline_exclusive(const struct vgpu_ledger *l,
				 uint64_t start_ns, uint64_t end_ns);

/* Records end_ns (vgpu_timeline_record) and returns the part of
 * [start_ns, end_ns] that vgpu_timeline_exclusive would, without its scan
 * when the newest end recorded before lies at or before start_ns (within
 * the same 1 us): no end
 * recorded so far can cut the interval (the common case of one busy
 * process, whose previous launch ended before this one started). The
 * newest end is lowered only past a clock skew (an end from another
 * boot): then an end inside the interval may be missed, and the launch
 * charged its whole interval, more than its own time, never less. */
uint64_t vgpu_timeline_record_own(struct vgpu_ledger *l, uint64_t start_ns,
				  uint64_t end_ns);

#endif
