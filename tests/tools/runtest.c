/* runtest.c - helpers of vgpu-run's end-to-end tests. */
#include "runtest.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static char dir[256];

/* Variables a job's limits come from: none may leak in from outside. */
static bool is_limit_var(const char *e)
{
	static const char *const prefixes[] = {
		"VGPU_", "CUDA_DEVICE_", "CUDA_OVERSUBSCRIBE=",
		"GPU_CORE_UTILIZATION_POLICY=", "LIBCUDA_LOG_LEVEL=",
		"CUDA_DISABLE_CONTROL=", "CUDA_VISIBLE_DEVICES=", "LD_PRELOAD=",
	};

	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
		if (strncmp(e, prefixes[i], strlen(prefixes[i])) == 0)
			return true;
	return false;
}

static void clear_limit_vars(void)
{
	char name[256];

	for (size_t i = 0; environ[i];) {
		if (!is_limit_var(environ[i])) {
			i++;
			continue;
		}
		snprintf(name, sizeof(name), "%.*s",
			 (int)strcspn(environ[i], "="), environ[i]);
		unsetenv(name);
	}
}

void runtest_setup(const char *sim_memory, int devices)
{
	const char *tmp = getenv("TMPDIR");
	char n[16];

	clear_limit_vars();
	snprintf(dir, sizeof(dir), "%s/vgpu-runtest-XXXXXX",
		 tmp && tmp[0] == '/' ? tmp : "/tmp");
	cr_assert_not_null(mkdtemp(dir));
	setenv("VGPU_LEDGER_DIR", runtest_path("ledger"), 1);
	setenv("VGPU_SIM_STATE_DIR", runtest_path("sim"), 1);
	setenv("VGPU_SIM_MEMORY", sim_memory, 1);
	snprintf(n, sizeof(n), "%d", devices);
	setenv("VGPU_SIM_DEVICES", n, 1);
}

static void remove_tree(const char *path)
{
	char sub[1024];
	struct dirent *de;
	struct stat st;
	DIR *d = opendir(path);

	if (!d)
		return;
	while ((de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
		if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
			remove_tree(sub);
		else
			unlink(sub);
	}
	closedir(d);
	rmdir(path);
}

void runtest_cleanup(void)
{
	if (dir[0])
		remove_tree(dir);
	dir[0] = '\0';
}

const char *runtest_dir(void)
{
	return dir;
}

char *runtest_path(const char *name)
{
	static char bufs[8][512];
	static unsigned next;
	char *b = bufs[next++ % 8];

	snprintf(b, sizeof(bufs[0]), "%s/%s", dir, name);
	return b;
}

static void slurp(int fd, char *buf, size_t len)
{
	ssize_t r;
	size_t got = 0;

	lseek(fd, 0, SEEK_SET);
	while (got + 1 < len && (r = read(fd, buf + got, len - 1 - got)) > 0)
		got += (size_t)r;
	buf[got] = '\0';
	close(fd);
}

static int temp_file(void)
{
	char path[600];
	int fd;

	snprintf(path, sizeof(path), "%s/out-XXXXXX", dir);
	fd = mkstemp(path);
	cr_assert_geq(fd, 0, "mkstemp: %s", strerror(errno));
	unlink(path);
	return fd;
}

void runtest_run(char *const argv[], struct run_result *r)
{
	int out = temp_file(), err = temp_file();
	pid_t pid;

	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		dup2(out, STDOUT_FILENO);
		dup2(err, STDERR_FILENO);
		execv(argv[0], argv);
		_exit(99);
	}
	r->pid = pid;
	cr_assert_eq(waitpid(pid, &r->status, 0), pid);
	slurp(out, r->out, sizeof(r->out));
	slurp(err, r->err, sizeof(r->err));
}

bool runtest_exited(const struct run_result *r, int code)
{
	return WIFEXITED(r->status) && WEXITSTATUS(r->status) == code;
}

bool runtest_killed(const struct run_result *r, int sig)
{
	return WIFSIGNALED(r->status) && WTERMSIG(r->status) == sig;
}

void runtest_hold(struct holder *h, char *const argv[])
{
	int in[2], out[2];
	char line[256];
	size_t got = 0;

	cr_assert_eq(pipe(in), 0);
	cr_assert_eq(pipe(out), 0);
	h->pid = fork();
	cr_assert_geq(h->pid, 0);
	if (h->pid == 0) {
		dup2(in[0], STDIN_FILENO);
		dup2(out[1], STDOUT_FILENO);
		close(in[1]);
		close(out[0]);
		execv(argv[0], argv);
		_exit(99);
	}
	close(in[0]);
	close(out[1]);
	h->in = in[1];
	/* Its first line, "ready PID", within 20 s. */
	while (got + 1 < sizeof(line)) {
		struct pollfd p = { .fd = out[0], .events = POLLIN };
		ssize_t r;

		cr_assert_gt(poll(&p, 1, 20000), 0, "%s: no ready line",
			     argv[0]);
		r = read(out[0], line + got, sizeof(line) - 1 - got);
		cr_assert_gt(r, 0, "%s exited before it was ready", argv[0]);
		got += (size_t)r;
		line[got] = '\0';
		if (strchr(line, '\n'))
			break;
	}
	close(out[0]);
	cr_assert(strncmp(line, "ready ", 6) == 0, "holder said: %s", line);
}

void runtest_release(struct holder *h)
{
	int status;

	close(h->in);
	cr_assert_eq(waitpid(h->pid, &status, 0), h->pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "holder status %#x", status);
}

const unsigned char *runtest_ledger(const char *ldir, const char *uuid)
{
	char path[1024] = "";
	struct dirent *de;
	void *base;
	int fd;

	if (uuid) {
		snprintf(path, sizeof(path), "%s/%s.v%d%s", ldir, uuid,
			 VGPU_LEDGER_VERSION, VGPU_LEDGER_SUFFIX);
	} else {
		DIR *d = opendir(ldir);
		while (d && (de = readdir(d)) != NULL)
			if (strstr(de->d_name, ".v3.ledger") &&
			    de->d_name[0] != '.')
				snprintf(path, sizeof(path), "%s/%s", ldir,
					 de->d_name);
		if (d)
			closedir(d);
	}
	fd = path[0] ? open(path, O_RDONLY) : -1;
	if (fd < 0)
		return NULL;
	base = mmap(NULL, VGPU_LEDGER_FILE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	return base == MAP_FAILED ? NULL : base;
}

void runtest_unmap(const unsigned char *base)
{
	if (base)
		munmap((void *)base, VGPU_LEDGER_FILE_SIZE);
}

const struct vgpu_ledger_tenant *runtest_tenant(const unsigned char *base,
						const char *name)
{
	for (unsigned i = 0; i < VGPU_LEDGER_MAX_TENANTS; i++) {
		const struct vgpu_ledger_tenant *t = (const void *)(base +
			VGPU_LEDGER_TENANTS_OFFSET + (size_t)i * VGPU_LEDGER_TENANT_SIZE);

		if (t->state == VGPU_TENANT_ACTIVE &&
		    strncmp(t->name, name, sizeof(t->name)) == 0)
			return t;
	}
	return NULL;
}
