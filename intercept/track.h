/* track.h - what the shim counted, keyed by pointer or handle.
 *
 * A table of live allocations the shim charged to the ledger, so that a
 * free gives back exactly what was charged, and a free of something the
 * shim never saw still reaches the driver without touching the ledger.
 * Lock-free open addressing: insert and remove are a few atomic operations,
 * no lock, no allocation (the table is mapped once, on first use).
 */
#ifndef VGPU_TRACK_H
#define VGPU_TRACK_H

#include <stdbool.h>
#include <stdint.h>

/* What one entry remembers, packed in 64 bits. */
struct vgpu_tracked {
	uint64_t bytes;		/* < 2^42 */
	unsigned kind;		/* VGPU_USAGE_*, < 32 */
	unsigned dev;		/* CUDA ordinal, < 64 */
	unsigned aux;		/* per kind (a pool's index), < 2048 */
};

enum vgpu_track_table {
	VGPU_TRACK_PTR,		/* device pointers */
	VGPU_TRACK_HANDLE,	/* arrays, VMM and multicast handles, contexts */
	VGPU_TRACK_TABLES
};

#define VGPU_TRACK_MAX_BYTES	((UINT64_C(1) << 42) - 1)

/* aux of a context's entry (kind VGPU_USAGE_CONTEXT): the key is a
 * CUgreenCtx, not a CUcontext. */
#define VGPU_CTX_GREEN	1u

/* Maps the tables; false (with a message) if that failed. Idempotent. */
bool vgpu__track_init(void);
/* false: no room (the table is full) or key 0/1 or bytes too large. */
bool vgpu__track_insert(int table, uint64_t key, const struct vgpu_tracked *t);
/* Inserts, or warns that the table is full: the charge then stays until
 * the process ends (over, never under). */
void vgpu__track_keep(int table, uint64_t key, const struct vgpu_tracked *t);
/* The same for bytes of kind charged on device dev (aux: per kind). */
void vgpu__track_charged(int table, uint64_t key, int kind, int dev,
			 uint64_t bytes, unsigned aux);
/* vgpu__track_charged for a key the driver has just handed out: an
 * entry the table still has for it is stale (its memory went without a
 * free the shim saw: a context destroyed while its sweep raced this
 * thread's allocation); it is taken out into *stale (true returned), for
 * the caller to give back. One walk of the key's chain does both. */
bool vgpu__track_charged_fresh(int table, uint64_t key, int kind, int dev,
			       uint64_t bytes, unsigned aux,
			       struct vgpu_tracked *stale);
/* Removes key; false if it was not there. */
bool vgpu__track_remove(int table, uint64_t key, struct vgpu_tracked *t);
/* For each live entry of table on device dev, calls gone(key, entry, arg);
 * an entry for which it returns true is removed and handed to drop(). Walks
 * the whole table: for rare events (a context destroyed), not hot paths. */
void vgpu__track_sweep(int table, unsigned dev,
		       bool (*gone)(uint64_t key, const struct vgpu_tracked *t),
		       void (*drop)(const struct vgpu_tracked *t));
/* In a forked child: forgets every entry (the parent's, not the child's). */
void vgpu__track_forget(void);
/* objects.c: gives back what a pointer entry charged (its kind's way:
 * a pool's allocation, shared memory, or a plain charge). */
void vgpu__ptr_drop(const struct vgpu_tracked *t);
/* Live entries, by a walk of the whole table (for tests). */
uint64_t vgpu__track_count(int table);

#endif
