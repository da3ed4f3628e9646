/* sim_record.c - reading the simulated device's record (sim_record.h). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "sim_record.h"

typedef long (*record_read_fn)(const char *, int, struct vsim_interval *,
			       size_t, struct vsim_record_info *);

/* The simulator's reader of its record, or NULL (a real driver). Under the
 * shim, which answers every dlopen of a libcuda name with itself, the
 * simulator it loaded (VGPU_REAL_LIBCUDA) is reached through a link of
 * another name. */
static record_read_fn record_reader(void)
{
	const char *real = getenv("VGPU_REAL_LIBCUDA");
	const char *dir = getenv("VGPU_SIM_STATE_DIR");
	void *f = dlsym(RTLD_DEFAULT, "vsim_record_read");
	char link[4200];
	void *h;

	if (f || !real || !dir)
		return (record_read_fn)f;
	snprintf(link, sizeof(link), "%s/share-%d-probe.so", dir, (int)getpid());
	if (symlink(real, link) != 0)
		return NULL;
	h = dlopen(link, RTLD_NOW | RTLD_NOLOAD);
	unlink(link);
	return h ? (record_read_fn)dlsym(h, "vsim_record_read") : NULL;
}


bool record_load(struct record *r)
{
	record_read_fn fn = record_reader();
	size_t max;

	if (!fn || fn(NULL, 0, NULL, 0, &r->info) < 0)
		return false;
	max = (size_t)(r->info.recorded - r->info.lost);
	r->iv = calloc(max + 1, sizeof(*r->iv));
	if (!r->iv)
		return false;
	r->n = fn(NULL, 0, r->iv, max, &r->info);
	return r->n >= 0 && r->info.sm_total;
}

uint64_t record_busy_of(const struct record *r, int32_t pid, uint64_t from,
			uint64_t to)
{
	uint64_t sum = 0;

	for (long i = 0; i < r->n; i++) {
		const struct vsim_interval *v = &r->iv[i];
		uint64_t a = v->start_ns > from ? v->start_ns : from;
		uint64_t b = v->end_ns < to ? v->end_ns : to;

		if ((!pid || v->pid == pid) && b > a)
			sum += (b - a) * v->sms / r->info.sm_total;
	}
	return sum;
}

uint64_t record_busy(const struct record *r, uint64_t from, uint64_t to)
{
	return record_busy_of(r, (int32_t)getpid(), from, to);
}
