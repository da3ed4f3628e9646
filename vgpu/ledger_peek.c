/* ledger_peek.c - a read-only look at one tenant of a ledger file, for
 * views that must not join (NVML's memory info in a process that never
 * used CUDA, such as nvidia-smi in a container).
 */
#include "ledger.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* The whole file, copied (not mapped: a file truncated meanwhile is then
 * a short read, not a SIGBUS), and checked; NULL with *rc set if not. */
static unsigned char *peek_file(const char *dir, const char *gpu_uuid,
				int *rc)
{
	const struct vgpu_ledger_header *h;
	unsigned char *base;
	char path[4200];
	struct stat st;
	int fd;

	snprintf(path, sizeof(path), "%s/%s.v%d%s", dir, gpu_uuid,
		 VGPU_LEDGER_VERSION, VGPU_LEDGER_SUFFIX);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		*rc = VGPU_LEDGER_ESYS;
		return NULL;
	}
	*rc = VGPU_LEDGER_EBADFILE;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    st.st_size != (off_t)VGPU_LEDGER_FILE_SIZE) {
		close(fd);
		return NULL;
	}
	base = malloc(VGPU_LEDGER_FILE_SIZE);
	if (!base) {
		close(fd);
		*rc = VGPU_LEDGER_ENOMEM;
		return NULL;
	}
	if (pread(fd, base, VGPU_LEDGER_FILE_SIZE, 0) !=
	    (ssize_t)VGPU_LEDGER_FILE_SIZE) {
		close(fd);
		free(base);
		return NULL;
	}
	close(fd);
	h = (const struct vgpu_ledger_header *)base;
	if (h->magic != VGPU_LEDGER_MAGIC ||
	    h->layout_version != VGPU_LEDGER_VERSION ||
	    h->file_size != VGPU_LEDGER_FILE_SIZE) {
		free(base);
		return NULL;
	}
	return base;
}

/* The index of the active tenant `tenant` in a copied file, or -1. */
static int tenant_index(const unsigned char *base, const char *tenant)
{
	for (unsigned i = 0; i < VGPU_LEDGER_MAX_TENANTS; i++) {
		const struct vgpu_ledger_tenant *t =
			(const void *)(base + VGPU_LEDGER_TENANTS_OFFSET +
				       (size_t)i * VGPU_LEDGER_TENANT_SIZE);

		if (__atomic_load_n(&t->state, __ATOMIC_ACQUIRE) ==
			    VGPU_TENANT_ACTIVE &&
		    strncmp(t->name, tenant, sizeof(t->name)) == 0)
			return (int)i;
	}
	return -1;
}

int vgpu_ledger_peek_tenant(const char *dir, const char *gpu_uuid,
			    const char *tenant, uint64_t *used,
			    uint64_t *limit)
{
	const struct vgpu_ledger_tenant *t;
	unsigned char *base;
	int rc, i;

	if (!dir || !gpu_uuid || !tenant || !used || !limit)
		return VGPU_LEDGER_EINVAL;
	base = peek_file(dir, gpu_uuid, &rc);
	if (!base)
		return rc;
	i = tenant_index(base, tenant);
	if (i < 0) {
		free(base);
		return VGPU_LEDGER_EINVAL;	/* no such tenant */
	}
	t = (const void *)(base + VGPU_LEDGER_TENANTS_OFFSET +
			   (size_t)i * VGPU_LEDGER_TENANT_SIZE);
	*used = __atomic_load_n(&t->used, __ATOMIC_RELAXED);
	*limit = __atomic_load_n(&t->mem_limit, __ATOMIC_RELAXED);
	free(base);
	return 0;
}

int vgpu_ledger_peek_procs(const char *dir, const char *gpu_uuid,
			   const char *tenant, struct vgpu_ledger_proc *out,
			   unsigned max, unsigned *count)
{
	unsigned char *base;
	unsigned n = 0;
	int rc, ti;

	if (!dir || !gpu_uuid || !tenant || !count || (max && !out))
		return VGPU_LEDGER_EINVAL;
	base = peek_file(dir, gpu_uuid, &rc);
	if (!base)
		return rc;
	ti = tenant_index(base, tenant);
	if (ti < 0) {
		free(base);
		*count = 0;
		return VGPU_LEDGER_EINVAL;
	}
	for (unsigned i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++) {
		const struct vgpu_ledger_slot *s =
			(const void *)(base + VGPU_LEDGER_SLOTS_OFFSET +
				       (size_t)i * VGPU_LEDGER_SLOT_SIZE);
		uint64_t bytes = 0;

		if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) !=
			    VGPU_SLOT_ACTIVE ||
		    s->tenant != (uint32_t)ti)
			continue;
		for (int k = 0; k < VGPU_USAGE_COUNT; k++)
			if (VGPU_USAGE_IS_DEVICE(k))
				bytes += s->usage[k];
		if (n < max)
			out[n] = (struct vgpu_ledger_proc){
				.pid = s->pid, .host_pid = s->host_pid,
				.device_bytes = bytes };
		n++;
	}
	free(base);
	*count = n;
	return 0;
}
