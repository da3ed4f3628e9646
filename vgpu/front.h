/* front.h - what every front end (CUDA's intercept/, HIP's intercept/hip/)
 * does the same way, in the vendor's terms only at the edges: the options
 * read and reported at start, a device tied to its ledger (the file of its
 * physical GPU, the tenant joined, its terms), the terms followed when
 * vgpu-ctl changes them, and the message of a tenant lock not had in time.
 *
 * A front end keeps one struct vgpu_device per device ordinal, asks the
 * driver for the device's key (its UUID as "GPU-" and 32 hex digits, the
 * ledger's file name) and its memory, and calls vgpu_device_join; the
 * hooks then read dv->state with one atomic load and charge dv->slot
 * through account.h.
 */
#ifndef VGPU_FRONT_H
#define VGPU_FRONT_H

#include "ledger.h"
#include "measure.h"
#include "options.h"
#include "throttle.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the options ---------------------------------------------------------- */

/* Reads the options from the environment into o, sets the log level,
 * reports bad values and unknown VGPU_ names (refusing the GPU or going on
 * by VGPU_ON_ERROR), warns of misspelt HAMi names, and dumps the options
 * when verbose. Returns the number of bad variables. */
int vgpu_front_options_start(struct vgpu_options *o);
/* Whether a bad option refuses the GPU under o (VGPU_ON_ERROR=refuse and
 * limits not off). */
bool vgpu_front_refuses(const struct vgpu_options *o);
/* Per-device variables checked against the count of devices the driver
 * shows: reported as bad ones; returns how many named an absent device. */
int vgpu_front_check_devices(const struct vgpu_options *o, unsigned count);

/* ---- a device ------------------------------------------------------------- */

enum { VGPU_DEV_NEW, VGPU_DEV_READY, VGPU_DEV_FAILED };

/* The fields every front end's device has, in this order; a front end's
 * own device struct may begin with them in an anonymous union with a
 * struct vgpu_device, so that its code reads dv->slot and hands the core
 * &dv->core. */
#define VGPU_DEVICE_FIELDS \
	int state;		/* VGPU_DEV_*, atomic */ \
	int ordinal; \
	struct vgpu_ledger *ledger; \
	struct vgpu_slot *slot;	/* NULL: not accounted (disabled, warn) */ \
	uint64_t physical;	/* the GPU's memory, from the driver */ \
	char uuid[VGPU_LEDGER_UUID_MAX]; \
	bool capped;		/* launches go through the throttle (atomic: \
				 * vgpu-ctl may turn it on) */ \
	unsigned share;		/* percent of the GPU's time */ \
	int policy;		/* enum vgpu_compute_policy */ \
	uint64_t ctl_seen;	/* the tenant's ctl_changes when its terms \
				 * were last read (atomic) */ \
	bool announcing;	/* not capped, and an opportunistic tenant \
				 * shares the GPU: launches stamp the \
				 * tenant active (atomic) */ \
	uint64_t opp_seen;	/* the GPU's opportunistic_ns when last \
				 * looked at (atomic) */ \
	/* ordinal, ledger and slot again, as the measuring of launches \
	 * sees the device (measure.h); set with them at join. */ \
	struct vgpu_measure_gpu gpu;

struct vgpu_device {
	VGPU_DEVICE_FIELDS
};

/* Whether any device has a compute share: set with the options, before
 * any launch, or later when vgpu-ctl gives an uncapped device a share;
 * never turned off (atomic). The launch hooks test it first. */
extern bool vgpu__compute_on;

/* The ledger's key of a GPU from its 16-byte UUID: "GPU-8-4-4-4-12" in
 * lower-case hex, as CUDA and nvidia-smi write it. */
void vgpu_device_uuid_string(const unsigned char uuid[16], char *out,
			     size_t len);

/* Whether a runtime's 16 UUID bytes name one device: not all zero, and
 * not ROCm's "GPU-XX" (the text a device without a unique id reports,
 * the same on every such device). */
bool vgpu_device_uuid_unique(const unsigned char *uuid);

/* The ledger's key of a device its runtime names by a unique UUID (uuid:
 * vgpu_device_uuid_string) or else by its PCI bus id (bus,
 * "0000:03:00.0": "PCI-0000-03-00-0"; a UUID that is not unique is used
 * only without one), as the HIP front end keys its ledgers and vgpu-run
 * lists HIP devices. False with neither. */
bool vgpu_device_key(const unsigned char *uuid, const char *bus, char *out,
		     size_t len);

/* Whether launches go through the throttle: a share that caps, or the
 * opportunistic class. */
bool vgpu_device_throttled(unsigned share, int policy);

/* vgpu_device_join's answers. */
enum {
	VGPU_DEVICE_JOINED,	/* dv->slot set; the caller adds its own and
				 * then sets dv->state READY (release) */
	VGPU_DEVICE_UNACCOUNTED, /* READY with no slot: limits off, or the
				 * ledger failed under VGPU_ON_ERROR=warn */
	VGPU_DEVICE_REFUSED,	/* FAILED (logged why) */
};

/* Ties dv (ordinal, key uuid, physical bytes) to its ledger under the
 * options o: opens the file, joins o's tenant with this process's terms
 * (the tenant's apply when it has them), reads the compute terms and
 * configures the throttle. refused: the front end refused the GPU over a
 * bad option. Called once per device, under the front end's attach lock;
 * makes no driver call. */
int vgpu_device_join(struct vgpu_device *dv, const struct vgpu_options *o,
		     int ordinal, const char *uuid, uint64_t physical,
		     bool refused);

/* The tenant's terms changed by vgpu-ctl (its ctl_changes moved): the
 * device's compute terms read again; a share that now caps turns the
 * throttle on for the device and the process (docs/control.md). */
void vgpu_device_terms_changed(struct vgpu_device *dv);

/* An opportunistic tenant began or stopped asking for dv's GPU: an
 * uncapped device starts or stops stamping its tenant active at its
 * launches (docs/compute.md, "The opportunistic class"). */
void vgpu_device_opportunistic(struct vgpu_device *dv);

/* One load and a compare each, the second branch taken only while an
 * opportunistic tenant is about: at synchronisations, allocations and
 * frees. True when the terms were read again. */
static inline bool vgpu_device_watch(struct vgpu_device *dv)
{
	bool changed = false;

	if (__builtin_expect(vgpu_ledger_ctl_changes(dv->slot) !=
			     __atomic_load_n(&dv->ctl_seen, __ATOMIC_RELAXED),
			     0)) {
		vgpu_device_terms_changed(dv);
		changed = true;
	}
	if (__builtin_expect(vgpu_throttle_opportunistic_ns(dv->slot) !=
			     __atomic_load_n(&dv->opp_seen, __ATOMIC_RELAXED) ||
			     __atomic_load_n(&dv->announcing, __ATOMIC_RELAXED),
			     0))
		vgpu_device_opportunistic(dv);
	return changed;
}

/* A charge that did not get the tenant's ledger lock within
 * VGPU_LEDGER_LOCK_TIMEOUT_NS: logs which tenant and which pid holds the
 * lock (at most once every 10 s per device), saying that the allocation
 * returns error (the front end's name of its timeout error). */
void vgpu_device_timeout(struct vgpu_device *dv, const char *error);

/* The memory views in a slice: *free and *total (the driver's) become
 * the tenant's when its limit is below the device: total the limit, free
 * what is left of it (never more than the driver's free, never below 0).
 * dv with no slot: unchanged. */
void vgpu_device_mem_view(const struct vgpu_device *dv, size_t *free,
			  size_t *total);
/* The device's total as the slice shows it: the tenant's limit once dv
 * joined, before that the configured one (o, ordinal), at most *bytes. */
void vgpu_device_total_view(const struct vgpu_device *dv,
			    const struct vgpu_options *o, int ordinal,
			    size_t *bytes);

/* ---- sizes ---------------------------------------------------------------- */

/* The device's smallest unit of allocation: an allocation holds whole
 * pages of device memory however few bytes it asks for (20,000 one-byte
 * allocations hold 80 MB), so each is charged its size rounded up to one.
 * Saturates. */
#define VGPU_ALLOC_UNIT 4096u

static inline uint64_t vgpu__alloc_size(uint64_t bytes)
{
	if (bytes > UINT64_MAX - (VGPU_ALLOC_UNIT - 1))
		return UINT64_MAX;
	return (bytes + VGPU_ALLOC_UNIT - 1) & ~(uint64_t)(VGPU_ALLOC_UNIT - 1);
}

/* A device reserves a pitched image for an array: each row padded, so a
 * narrow array costs far more than its elements (a 1-byte-wide one, 512
 * times). Where the driver does not report the size, the estimate is each
 * row of w elements of elem bytes rounded up to VGPU_ARRAY_ROW_ALIGN, times
 * the rows and slices (0 counts as 1), rounded up to whole pages;
 * saturates at UINT64_MAX (docs/memory.md). */
#define VGPU_ARRAY_ROW_ALIGN 512u

static inline uint64_t vgpu_array_bytes(uint64_t elem, size_t w, size_t h,
					size_t d)
{
	uint64_t row, rows = (uint64_t)(h ? h : 1);

	elem = elem ? elem : 1;
	if (w > (UINT64_MAX - VGPU_ARRAY_ROW_ALIGN) / elem)
		return UINT64_MAX;
	row = ((uint64_t)w * elem + VGPU_ARRAY_ROW_ALIGN - 1) /
	      VGPU_ARRAY_ROW_ALIGN * VGPU_ARRAY_ROW_ALIGN;
	row = row ? row : VGPU_ARRAY_ROW_ALIGN;
	if (d > 1 && rows > UINT64_MAX / d)
		return UINT64_MAX;
	rows *= d ? d : 1;
	if (rows > (UINT64_MAX - VGPU_ALLOC_UNIT) / row)
		return UINT64_MAX;
	return vgpu__alloc_size(row * rows);
}

/* A mipmapped array's estimate: the sum of its levels (vgpu_array_bytes
 * each), which halve width and height, and the depth unless it counts
 * layers or cube faces (layers), down to 1; at most levels (0 counts as
 * 1) and no more than the largest extent allows. Saturates. */
static inline uint64_t vgpu_mipmap_bytes(uint64_t elem, size_t w, size_t h,
					 size_t d, bool layers,
					 unsigned levels)
{
	uint64_t sum = 0;

	levels = levels ? levels : 1;
	for (unsigned i = 0; i < levels && i < 64; i++) {
		uint64_t b = vgpu_array_bytes(elem, w, h, d);

		if (b > UINT64_MAX - sum)
			return UINT64_MAX;
		sum += b;
		if (w <= 1 && h <= 1 && (layers || d <= 1))
			break;
		w = w > 1 ? w / 2 : w;
		h = h > 1 ? h / 2 : h;
		d = !layers && d > 1 ? d / 2 : d;
	}
	return sum;
}

/* ---- the host, for the primitives (prim.h) --------------------------------- */

uint64_t vgpu_host_now(void);		/* CLOCK_MONOTONIC, ns */
uint64_t vgpu_host_now_coarse(void);	/* its coarse reading */
void vgpu_host_sleep(uint64_t ns);	/* 0: yields once */
/* Sleeps while *word (process-private) holds val, up to ns (a futex). */
void vgpu_host_wait_on(uint32_t *word, uint32_t val, uint64_t ns);

/* At exit: dv's ledger left (its slots given back), dv FAILED. */
void vgpu_device_leave(struct vgpu_device *dv);

/* In a forked child: the core's own state afresh, and dv (the parent's)
 * forgotten and zeroed; call it for each device. */
void vgpu_front_fork_child(void);
void vgpu_device_forget(struct vgpu_device *dv);

#endif
