/* vgpu-run-place.c - choosing the GPU for --gpu auto.
 *
 * A pure function over what vgpu-run-gpus.c read: among the GPUs whose
 * unreserved memory and compute cover the request, spread takes the one
 * with the fewest tasks, binpack the fullest; ties go to the lowest index.
 */
#include "vgpu-run.h"

#include <inttypes.h>
#include <stdio.h>

uint64_t vrun_free_bytes(const struct vrun_gpu *g)
{
	return g->reserved >= g->total ? 0 : g->total - g->reserved;
}

unsigned vrun_free_pct(const struct vrun_gpu *g)
{
	return g->reserved_pct >= 100 ? 0 : 100 - g->reserved_pct;
}

/* An unlimited request needs the whole GPU: nothing reserved on it. */
bool vrun_fits(const struct vrun_gpu *g, const struct vrun_request *r)
{
	uint64_t need = r->bytes == VGPU_LEDGER_UNLIMITED ? g->total : r->bytes;

	return need <= vrun_free_bytes(g) && r->pct <= vrun_free_pct(g) &&
	       g->total > 0;
}

/* Whether a is a better choice than b (both fit). */
static bool better(const struct vrun_gpu *a, const struct vrun_gpu *b,
		   int mode)
{
	if (mode == VRUN_PLACE_BINPACK) {
		if (vrun_free_bytes(a) != vrun_free_bytes(b))
			return vrun_free_bytes(a) < vrun_free_bytes(b);
		if (vrun_free_pct(a) != vrun_free_pct(b))
			return vrun_free_pct(a) < vrun_free_pct(b);
	} else if (a->tasks != b->tasks) {
		return a->tasks < b->tasks;
	}
	return a->index < b->index;
}

int vrun_place(const struct vrun_gpu *gpus, size_t n,
	       const struct vrun_request *r, int mode)
{
	int best = -1;

	for (size_t i = 0; i < n; i++) {
		if (!vrun_fits(&gpus[i], r))
			continue;
		if (best < 0 || better(&gpus[i], &gpus[best], mode))
			best = (int)i;
	}
	return best;
}

void vrun_human_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	unsigned u = 0;
	uint64_t scale = 1;

	if (bytes == VGPU_LEDGER_UNLIMITED) {
		snprintf(buf, len, "unlimited");
		return;
	}
	while (u < 4 && bytes >= scale * 1024) {
		scale *= 1024;
		u++;
	}
	if (bytes % scale == 0)
		snprintf(buf, len, "%" PRIu64 " %s", bytes / scale, units[u]);
	else
		snprintf(buf, len, "%.1f %s", (double)bytes / (double)scale,
			 units[u]);
}

void vrun_describe_gpu(const struct vrun_gpu *g, char *buf, size_t len)
{
	char fr[32], tot[32];

	vrun_human_size(g->total, tot, sizeof(tot));
	if (g->unread) {
		snprintf(buf, len, "GPU %u (%s): %s, not considered: its "
			 "ledger could not be used (above)", g->index,
			 g->uuid, tot);
		return;
	}
	vrun_human_size(vrun_free_bytes(g), fr, sizeof(fr));
	snprintf(buf, len, "GPU %u (%s): %s of %s memory free, %u%% compute "
		 "free, %u task%s", g->index, g->uuid, fr, tot,
		 vrun_free_pct(g), g->tasks, g->tasks == 1 ? "" : "s");
}
