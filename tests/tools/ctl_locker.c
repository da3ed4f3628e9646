/* ctl_locker.c - a process of a tenant that takes the tenant's ledger lock
 * and stops holding it (SIGSTOP), for vgpu-ctl's timeout test.
 *
 *   tools-ctl-locker DIR UUID TENANT
 *
 * Opens (creating) the ledger of GPU UUID in DIR, joins TENANT with a
 * 1 GiB limit, takes the lock, prints "locked PID" and stops itself. Exits
 * 2 when any step fails.
 */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include "ledger.h"

int main(int argc, char **argv)
{
	struct vgpu_ledger *l;
	struct vgpu_slot *s;
	char err[1024];

	if (argc != 4 ||
	    vgpu_ledger_open(argv[1], argv[2], 1ull << 30, &l, err,
			     sizeof(err)) ||
	    vgpu_ledger_join(l, argv[3], 1ull << 30, getpid(), 0, &s, err,
			     sizeof(err)) < 0 ||
	    vgpu__ledger_lock(s)) {
		fprintf(stderr, "tools-ctl-locker: failed\n");
		return 2;
	}
	printf("locked %d\n", (int)getpid());
	fflush(stdout);
	raise(SIGSTOP);
	for (;;)
		pause();
}
