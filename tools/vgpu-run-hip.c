/* vgpu-run-hip.c - vgpu-run for HIP programs (AMD GPUs, Hygon DCUs): is
 * the command one, and where is libvgpu-hip.so.
 *
 * A HIP job is preloaded libvgpu-hip.so instead of libvgpu.so (docs/hip.md:
 * one front end per process, or the simulated runtime would be charged
 * twice). vgpu-run takes --hip, or sees that the command's executable
 * needs the HIP runtime (libamdhip64.so.N in its ELF dynamic section);
 * a script or a program that dlopens the runtime needs --hip.
 */
#include "vgpu-run.h"

#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HIP_SHIM_NAME "libvgpu-hip.so"
#define HIP_RUNTIME "libamdhip64.so"

/* cmd as execvp finds it: itself with a '/', else the first executable
 * file of that name in $PATH. */
static bool resolve(const char *cmd, char *out, size_t len)
{
	const char *path = getenv("PATH");

	if (strchr(cmd, '/')) {
		snprintf(out, len, "%s", cmd);
		return true;
	}
	for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
		size_t n = strcspn(p, ":");

		snprintf(out, len, "%.*s/%s", (int)n, n ? p : ".", cmd);
		if (access(out, X_OK) == 0)
			return true;
		p += n + (p[n] == ':');
	}
	return false;
}

static bool read_at(int fd, void *buf, size_t n, uint64_t off)
{
	return pread(fd, buf, n, (off_t)off) == (ssize_t)n;
}

/* The file offset of virtual address va (in a PT_LOAD), or 0. */
static uint64_t file_offset(int fd, const Elf64_Ehdr *eh, uint64_t va)
{
	Elf64_Phdr ph;

	for (unsigned i = 0; i < eh->e_phnum; i++)
		if (read_at(fd, &ph, sizeof(ph), eh->e_phoff +
			    (uint64_t)i * eh->e_phentsize) &&
		    ph.p_type == PT_LOAD && va >= ph.p_vaddr &&
		    va < ph.p_vaddr + ph.p_filesz)
			return va - ph.p_vaddr + ph.p_offset;
	return 0;
}

/* Whether the ELF64 file fd needs libamdhip64.so.* (DT_NEEDED). */
static bool needs_hip(int fd)
{
	Elf64_Ehdr eh;
	Elf64_Phdr ph;
	Elf64_Dyn dyn[512];
	uint64_t strtab = 0, dynoff = 0, dynsz = 0;
	size_t nd;
	char name[64];

	if (!read_at(fd, &eh, sizeof(eh), 0) ||
	    memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh.e_phentsize != sizeof(Elf64_Phdr))
		return false;
	for (unsigned i = 0; i < eh.e_phnum && !dynoff; i++)
		if (read_at(fd, &ph, sizeof(ph), eh.e_phoff +
			    (uint64_t)i * sizeof(ph)) && ph.p_type == PT_DYNAMIC) {
			dynoff = ph.p_offset;
			dynsz = ph.p_filesz;
		}
	nd = dynsz / sizeof(Elf64_Dyn);
	if (nd > sizeof(dyn) / sizeof(dyn[0]))
		nd = sizeof(dyn) / sizeof(dyn[0]);
	if (!dynoff || !read_at(fd, dyn, nd * sizeof(Elf64_Dyn), dynoff))
		return false;
	for (size_t i = 0; i < nd && dyn[i].d_tag != DT_NULL; i++)
		if (dyn[i].d_tag == DT_STRTAB)
			strtab = file_offset(fd, &eh, dyn[i].d_un.d_ptr);
	for (size_t i = 0; strtab && i < nd && dyn[i].d_tag != DT_NULL; i++) {
		if (dyn[i].d_tag != DT_NEEDED ||
		    !read_at(fd, name, sizeof(name) - 1,
			     strtab + dyn[i].d_un.d_val))
			continue;
		name[sizeof(name) - 1] = '\0';
		if (strncmp(name, HIP_RUNTIME, sizeof(HIP_RUNTIME) - 1) == 0)
			return true;
	}
	return false;
}

bool vrun_is_hip_program(const char *cmd)
{
	char path[VRUN_PATH_MAX];
	bool hip;
	int fd;

	if (!resolve(cmd, path, sizeof(path)))
		return false;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return false;
	hip = needs_hip(fd);
	close(fd);
	return hip;
}

/* libvgpu.so's path with its name replaced: the same places, the HIP
 * front end's name (build tree: intercept/hip/, beside intercept/). */
int vrun_find_hip_library(const char *shim, char *out, size_t len,
			  char *err, size_t errlen)
{
	const char *forced = getenv("VGPU_HIP_LIBRARY");
	const char *slash = strrchr(shim, '/');
	int dirlen = slash ? (int)(slash - shim) : 0;
	char cand[2][VRUN_PATH_MAX + 64];

	if (forced) {
		if (forced[0] == '/' && access(forced, R_OK) == 0) {
			snprintf(out, len, "%s", forced);
			return 0;
		}
		snprintf(err, errlen, "VGPU_HIP_LIBRARY=\"%s\" is not a "
			 "readable file; expected the absolute path of "
			 HIP_SHIM_NAME, forced);
		return -1;
	}
	snprintf(cand[0], sizeof(cand[0]), "%.*s/hip/" HIP_SHIM_NAME, dirlen,
		 shim);
	snprintf(cand[1], sizeof(cand[1]), "%.*s/" HIP_SHIM_NAME, dirlen,
		 shim);
	for (int i = 0; i < 2; i++)
		if (access(cand[i], R_OK) == 0) {
			snprintf(out, len, "%s", cand[i]);
			return 0;
		}
	snprintf(err, errlen, HIP_SHIM_NAME " not found: looked for %s and "
		 "%s; set VGPU_HIP_LIBRARY to its path", cand[0], cand[1]);
	return -1;
}
