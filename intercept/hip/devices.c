/* devices.c - each HIP device's place in the ledger.
 *
 * Devices are HIP ordinals (after HIP_VISIBLE_DEVICES or
 * ROCR_VISIBLE_DEVICES, which the runtime applies), the index space of
 * every option. The key of a device's ledger is its UUID written as the
 * CUDA front end writes it ("GPU-" and 32 hex digits), so a device that
 * both runtimes show (the simulated one) has one ledger for its CUDA and
 * HIP tenants; a runtime that cannot say a UUID keys it by its PCI bus id.
 * The joining itself is the core's (vgpu/front.c).
 */
#include "hip.h"
#include "track.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static struct vgpu_hip_dev devs[VGPU_MAX_DEVICES];
static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t count_once = PTHREAD_ONCE_INIT;
static int absent_devices;

/* Per-device variables naming a device the runtime does not show. */
static void check_count(void)
{
	int count = 0;

	if (vgpu__hip.hipGetDeviceCount &&
	    vgpu__hip.hipGetDeviceCount(&count) == hipSuccess)
		absent_devices = vgpu_front_check_devices(vgpu__hip_options(),
			count > 0 ? (unsigned)count : 0);
}

/* Also smi.c's, with the runtime it opens itself. */
bool vgpu__hip_device_key(hipError_t (*uuid_of)(hipUUID *, hipDevice_t),
			  hipError_t (*bus_of)(char *, int, int), int d,
			  char *key, size_t len)
{
	hipUUID u;
	char bus[32];
	bool named, on_bus;

	memset(&u, 0, sizeof(u));
	named = uuid_of && uuid_of(&u, d) == hipSuccess;
	if (named && vgpu_device_uuid_unique((const unsigned char *)u.bytes))
		return vgpu_device_key((const unsigned char *)u.bytes, NULL,
				       key, len);
	on_bus = bus_of && bus_of(bus, (int)sizeof(bus), d) == hipSuccess;
	return vgpu_device_key(named ? (const unsigned char *)u.bytes : NULL,
			       on_bus ? bus : NULL, key, len);
}

static bool device_key(int d, char *key, size_t len)
{
	return vgpu__hip_device_key(vgpu__hip.hipDeviceGetUuid,
				    vgpu__hip.hipDeviceGetPCIBusId, d, key,
				    len);
}

struct vgpu_hip_dev *vgpu__hip_dev_attach(int d)
{
	struct vgpu_hip_dev *dv;
	char key[VGPU_LEDGER_UUID_MAX];
	size_t total = 0;
	bool refused;
	int cancel;

	vgpu_guard_thread();	/* before any touch of a ledger */
	if (d < 0 || d >= VGPU_MAX_DEVICES)
		return NULL;
	dv = &devs[d];
	if (__atomic_load_n(&dv->state, __ATOMIC_ACQUIRE) != VGPU_DEV_NEW)
		return dv;
	if (!vgpu__track_init())
		return NULL;
	/* Runtime calls first, then the lock. */
	pthread_once(&count_once, check_count);
	if (!vgpu__hip.hipDeviceTotalMem || !device_key(d, key, sizeof(key)) ||
	    vgpu__hip.hipDeviceTotalMem(&total, d) != hipSuccess)
		return NULL;
	refused = vgpu__hip_refused() ||
		  (__atomic_load_n(&absent_devices, __ATOMIC_RELAXED) &&
		   vgpu_front_refuses(vgpu__hip_options()));
	/* Not cancelled while it holds attach_lock (the join opens, locks
	 * and logs), as the CUDA front end's attach. */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
	pthread_mutex_lock(&attach_lock);
	if (__atomic_load_n(&dv->state, __ATOMIC_ACQUIRE) == VGPU_DEV_NEW &&
	    vgpu_device_join(&dv->core, vgpu__hip_options(), d, key, total,
			     refused) == VGPU_DEVICE_JOINED) {
		/* vgpu-top tells the front ends apart by it. */
		if (dv->slot)
			vgpu_ledger_slot_flags(dv->slot, VGPU_LEDGER_SLOT_HIP,
					       0);
		__atomic_store_n(&dv->state, VGPU_DEV_READY, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&attach_lock);
	pthread_setcancelstate(cancel, NULL);
	return dv;
}

struct vgpu_hip_dev *vgpu__hip_dev_current(void)
{
	int d;

	vgpu__hip_start();
	if (!vgpu__hip.hipGetDevice || vgpu__hip.hipGetDevice(&d) != hipSuccess)
		return NULL;
	return vgpu__hip_dev_attach(d);
}

/* A device made current joins its ledger at once, as a CUDA context's
 * device does when the context is made: its tenant's compute terms apply
 * from the first launch (a process that asked for no share, of a capped
 * tenant, is capped too), even if it never allocates. */
hipError_t hipSetDevice(int dev)
{
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipSetDevice)
		return hipErrorNotInitialized;
	r = vgpu__hip.hipSetDevice(dev);
	if (r == hipSuccess)
		vgpu__hip_dev_attach(dev);
	return r;
}

struct vgpu_hip_dev *vgpu__hip_dev_peek(int d)
{
	vgpu_guard_thread();
	if (d < 0 || d >= VGPU_MAX_DEVICES)
		return NULL;
	return __atomic_load_n(&devs[d].state, __ATOMIC_ACQUIRE) ==
	       VGPU_DEV_READY ? &devs[d] : NULL;
}

hipError_t vgpu__hip_charge(struct vgpu_hip_dev *dv, int kind,
			    uint64_t bytes)
{
	int rc;

	if (!dv || __atomic_load_n(&dv->state, __ATOMIC_ACQUIRE) !=
			   VGPU_DEV_READY)
		return hipErrorInvalidDevice;
	if (!dv->slot)
		return hipSuccess;
	vgpu_device_watch(&dv->core);
	rc = vgpu_account_reserve(dv->slot, dv->ordinal, kind, bytes);
	if (__builtin_expect(rc == VGPU_ACCOUNT_OK, 1))
		return hipSuccess;
	if (rc == VGPU_ACCOUNT_TIMEOUT)
		vgpu_device_timeout(&dv->core, "hipErrorOutOfMemory");
	return rc == VGPU_ACCOUNT_INVALID ? hipErrorInvalidValue
					  : hipErrorOutOfMemory;
}

void vgpu__hip_uncharge(struct vgpu_hip_dev *dv, int kind, uint64_t bytes)
{
	if (dv && dv->slot) {
		vgpu_device_watch(&dv->core);
		vgpu_account_rollback(dv->slot, kind, bytes);
	}
}

void vgpu__hip_dev_poll(void)
{
	for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
		struct vgpu_hip_dev *dv = vgpu__hip_dev_peek(i);

		if (dv && dv->slot) {
			vgpu_ledger_poll(dv->ledger);
			vgpu_device_watch(&dv->core);
		}
	}
}

void vgpu__hip_dev_leave_all(void)
{
	for (int i = 0; i < VGPU_MAX_DEVICES; i++)
		vgpu_device_leave(&devs[i].core);
}

void vgpu__hip_dev_fork_child(void)
{
	pthread_mutex_init(&attach_lock, NULL);
	vgpu_front_fork_child();
	for (int i = 0; i < VGPU_MAX_DEVICES; i++)
		vgpu_device_forget(&devs[i].core);
}
