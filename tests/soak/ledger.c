/* ledger.c - soak-ledger DIR: the soak's view of every ledger in DIR.
 *
 * For each <uuid>.v<N>.ledger it first reclaims dead processes' slots
 * (vgpu_ledger_reclaim, as a process that needs room would), then reads
 * the file with the public structs of include/vgpu.h and prints:
 *
 *   ledger UUID reclaimed N
 *   tenant UUID INDEX NAME used U kinds K limit L share P gpu_time_ns G
 *   slot UUID INDEX tenant T pid P alive 0|1 bytes B
 *
 * U is the tenant's `used`, K the sum of its device kinds' usage, B the
 * sum of a slot's device kinds; `alive`: someone holds the slot's byte.
 * Only active records are printed. Exit 1 when a ledger cannot be read.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ledger.h"
#include "vgpu.h"

static uint64_t ld64(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static uint64_t device_sum(const uint64_t *usage)
{
	uint64_t sum = 0;

	for (int k = 0; k < VGPU_USAGE_COUNT; k++)
		if (k != VGPU_USAGE_SPILLED)
			sum += ld64(&usage[k]);
	return sum;
}

static int slot_alive(int fd, uint32_t i)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
			    .l_start = (off_t)VGPU_LEDGER_SLOTS_OFFSET +
				       (off_t)i * VGPU_LEDGER_SLOT_SIZE,
			    .l_len = 1 };

	if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
		return -1;
	return fl.l_type != F_UNLCK;
}

static void print_records(const char *uuid, const char *base, int fd)
{
	const struct vgpu_ledger_tenant *t = (const void *)
		(base + VGPU_LEDGER_TENANTS_OFFSET);
	const struct vgpu_ledger_slot *s = (const void *)
		(base + VGPU_LEDGER_SLOTS_OFFSET);

	for (uint32_t i = 0; i < VGPU_LEDGER_MAX_TENANTS; i++) {
		if (__atomic_load_n(&t[i].state, __ATOMIC_ACQUIRE) != 1)
			continue;
		printf("tenant %s %u %.63s used %llu kinds %llu limit %llu "
		       "share %u gpu_time_ns %llu\n", uuid, i, t[i].name,
		       (unsigned long long)ld64(&t[i].used),
		       (unsigned long long)device_sum(t[i].usage),
		       (unsigned long long)ld64(&t[i].mem_limit),
		       t[i].compute.share_pct,
		       (unsigned long long)ld64(&t[i].compute.gpu_time_ns));
	}
	for (uint32_t i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++) {
		if (__atomic_load_n(&s[i].state, __ATOMIC_ACQUIRE) != 1)
			continue;
		printf("slot %s %u tenant %u pid %d alive %d bytes %llu\n",
		       uuid, i, s[i].tenant, s[i].pid, slot_alive(fd, i),
		       (unsigned long long)device_sum(s[i].usage));
	}
}

static int one(const char *dir, const char *file)
{
	char uuid[VGPU_LEDGER_UUID_MAX], path[4096], err[512];
	const char *dot = strstr(file, ".v");
	struct vgpu_ledger *l;
	int fd, n;

	if (!dot || (size_t)(dot - file) >= sizeof(uuid))
		return 0;
	snprintf(uuid, sizeof(uuid), "%.*s", (int)(dot - file), file);
	if (vgpu_ledger_open(dir, uuid, 0, &l, err, sizeof(err)) != 0) {
		fprintf(stderr, "soak-ledger: %s\n", err);
		return 1;
	}
	n = vgpu_ledger_reclaim(l);
	printf("ledger %s reclaimed %d\n", uuid, n);
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		vgpu_ledger_close(l);
		return 1;
	}
	print_records(uuid, (const char *)vgpu_ledger_header(l), fd);
	close(fd);
	vgpu_ledger_close(l);
	return 0;
}

int main(int argc, char **argv)
{
	struct dirent *e;
	DIR *d;
	int rc = 0;

	if (argc != 2 || !(d = opendir(argv[1]))) {
		fprintf(stderr, "usage: soak-ledger DIR\n");
		return 2;
	}
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' &&
		    strstr(e->d_name, VGPU_LEDGER_SUFFIX))
			rc |= one(argv[1], e->d_name);
	closedir(d);
	return rc;
}
