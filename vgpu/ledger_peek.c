/* ledger_peek.c - a read-only look at one tenant of a ledger file, for
 * views that must not join (NVML's memory info in a process that never
 * used CUDA, such as nvidia-smi in a container).
 */
#include "ledger.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int vgpu_ledger_peek_tenant(const char *dir, const char *gpu_uuid,
			    const char *tenant, uint64_t *used,
			    uint64_t *limit)
{
	char path[4200];
	struct stat st;
	const unsigned char *base;
	const struct vgpu_ledger_header *h;
	int fd, rc = VGPU_LEDGER_EBADFILE;

	if (!dir || !gpu_uuid || !tenant || !used || !limit)
		return VGPU_LEDGER_EINVAL;
	snprintf(path, sizeof(path), "%s/%s.v%d%s", dir, gpu_uuid,
		 VGPU_LEDGER_VERSION, VGPU_LEDGER_SUFFIX);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return VGPU_LEDGER_ESYS;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    st.st_size != (off_t)VGPU_LEDGER_FILE_SIZE) {
		close(fd);
		return VGPU_LEDGER_EBADFILE;
	}
	base = mmap(NULL, VGPU_LEDGER_FILE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (base == MAP_FAILED)
		return VGPU_LEDGER_ESYS;
	h = (const struct vgpu_ledger_header *)base;
	if (h->magic != VGPU_LEDGER_MAGIC ||
	    h->layout_version != VGPU_LEDGER_VERSION ||
	    h->file_size != VGPU_LEDGER_FILE_SIZE)
		goto out;
	rc = VGPU_LEDGER_EINVAL;	/* no such tenant */
	for (unsigned i = 0; i < VGPU_LEDGER_MAX_TENANTS; i++) {
		const struct vgpu_ledger_tenant *t =
			(const void *)(base + VGPU_LEDGER_TENANTS_OFFSET +
				       (size_t)i * VGPU_LEDGER_TENANT_SIZE);

		if (__atomic_load_n(&t->state, __ATOMIC_ACQUIRE) !=
			    VGPU_TENANT_ACTIVE ||
		    strncmp(t->name, tenant, sizeof(t->name)) != 0)
			continue;
		*used = __atomic_load_n(&t->used, __ATOMIC_RELAXED);
		*limit = __atomic_load_n(&t->mem_limit, __ATOMIC_RELAXED);
		rc = 0;
		break;
	}
out:
	munmap((void *)base, VGPU_LEDGER_FILE_SIZE);
	return rc;
}
