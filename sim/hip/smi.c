/* smi.c - librocm_smi64.so.1 of the simulated device: ROCm SMI's device
 * list and memory queries, answered from the same shared device state as
 * the simulated libcuda and libamdhip64 (sim/state.c), as sim/nvml.c does
 * for NVML.
 *
 * The device is the one HIP and CUDA processes share: its PCI bus id is
 * the simulated driver's (domain 0, bus 0x10 + physical index), so a
 * program can match an SMI device to a HIP device by bus id; its unique
 * id is the first 8 bytes of its UUID (big-endian). Devices are numbered
 * physically: HIP_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES do not apply,
 * as with AMD's library. Only VRAM is memory here: GTT and visible VRAM
 * are NOT_SUPPORTED.
 */
#include "sim.h"

#include <rocm_smi/rocm_smi.h>
#include <stdio.h>
#include <string.h>

#define VSIM_SMI_EXPORT __attribute__((visibility("default")))
/* gfx90a (an MI210's device id) */
#define VSIM_SMI_DEVICE_ID 0x740f

static pthread_mutex_t smi_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned init_refs;
static struct vsim_config cfg;

static const struct {
	rsmi_status_t status;
	const char *text;
} status_text[] = {
	{ RSMI_STATUS_SUCCESS, "RSMI_STATUS_SUCCESS: The function has been "
	  "executed successfully." },
	{ RSMI_STATUS_INVALID_ARGS, "RSMI_STATUS_INVALID_ARGS: The provided "
	  "arguments do not meet the preconditions required for calling "
	  "this function." },
	{ RSMI_STATUS_NOT_SUPPORTED, "RSMI_STATUS_NOT_SUPPORTED: This "
	  "function is not supported in the current environment." },
	{ RSMI_STATUS_INIT_ERROR, "RSMI_STATUS_INIT_ERROR: An error occurred "
	  "during initialization, during monitor discovery or when "
	  "initializing internal data structures" },
	{ RSMI_STATUS_NOT_FOUND, "RSMI_STATUS_NOT_FOUND: An item required to "
	  "complete the call was not found" },
	{ RSMI_STATUS_INSUFFICIENT_SIZE, "RSMI_STATUS_INSUFFICIENT_SIZE: Not "
	  "enough resources were available to fully execute the call" },
};

static bool initialized(void)
{
	bool on;

	pthread_mutex_lock(&smi_lock);
	on = init_refs > 0;
	pthread_mutex_unlock(&smi_lock);
	return on;
}

/* RSMI_STATUS_SUCCESS when dv is a device and out is not NULL. */
static rsmi_status_t check(uint32_t dv, const void *out)
{
	if (!initialized())
		return RSMI_STATUS_INIT_ERROR;
	if (!out || dv >= (uint32_t)cfg.devices)
		return RSMI_STATUS_INVALID_ARGS;
	return RSMI_STATUS_SUCCESS;
}

VSIM_SMI_EXPORT rsmi_status_t rsmi_init(uint64_t flags)
{
	rsmi_status_t rc = RSMI_STATUS_SUCCESS;
	char err[512];

	(void)flags;
	pthread_mutex_lock(&smi_lock);
	if (init_refs == 0 && vsim_config_from_env(&cfg, err,
						   sizeof(err)) != 0) {
		vsim_log("%s", err);
		rc = RSMI_STATUS_INIT_ERROR;
	}
	if (rc == RSMI_STATUS_SUCCESS)
		init_refs++;
	pthread_mutex_unlock(&smi_lock);
	return rc;
}

/* Each successful init is matched by one shutdown. */
VSIM_SMI_EXPORT rsmi_status_t rsmi_shut_down(void)
{
	rsmi_status_t rc = RSMI_STATUS_SUCCESS;

	pthread_mutex_lock(&smi_lock);
	if (init_refs == 0)
		rc = RSMI_STATUS_INIT_ERROR;
	else
		init_refs--;
	pthread_mutex_unlock(&smi_lock);
	return rc;
}

VSIM_SMI_EXPORT rsmi_status_t rsmi_num_monitor_devices(uint32_t *n)
{
	if (!initialized())
		return RSMI_STATUS_INIT_ERROR;
	if (!n)
		return RSMI_STATUS_INVALID_ARGS;
	*n = (uint32_t)cfg.devices;
	return RSMI_STATUS_SUCCESS;
}

VSIM_SMI_EXPORT rsmi_status_t rsmi_version_get(rsmi_version_t *v)
{
	if (!v)
		return RSMI_STATUS_INVALID_ARGS;
	*v = (rsmi_version_t){ 5, 2, 0, "5.2.0-vgpu-sim" };
	return RSMI_STATUS_SUCCESS;
}

VSIM_SMI_EXPORT rsmi_status_t rsmi_status_string(rsmi_status_t status,
						 const char **text)
{
	if (!text)
		return RSMI_STATUS_INVALID_ARGS;
	*text = "An unknown error occurred";
	for (size_t i = 0; i < sizeof(status_text) / sizeof(status_text[0]);
	     i++)
		if (status_text[i].status == status)
			*text = status_text[i].text;
	return RSMI_STATUS_SUCCESS;
}

VSIM_SMI_EXPORT rsmi_status_t rsmi_dev_id_get(uint32_t dv, uint16_t *id)
{
	rsmi_status_t rc = check(dv, id);

	if (rc == RSMI_STATUS_SUCCESS)
		*id = VSIM_SMI_DEVICE_ID;
	return rc;
}

VSIM_SMI_EXPORT rsmi_status_t rsmi_dev_name_get(uint32_t dv, char *name,
						size_t len)
{
	rsmi_status_t rc = check(dv, name);

	if (rc != RSMI_STATUS_SUCCESS)
		return rc;
	if (len == 0)
		return RSMI_STATUS_INVALID_ARGS;
	snprintf(name, len, "%s", cfg.name);
	return strlen(cfg.name) < len ? RSMI_STATUS_SUCCESS
				      : RSMI_STATUS_INSUFFICIENT_SIZE;
}

/* Domain 0, bus 0x10 + index, device 0, function 0: the simulated
 * driver's cuDeviceGetPCIBusId (sim/init.c). */
VSIM_SMI_EXPORT rsmi_status_t rsmi_dev_pci_id_get(uint32_t dv,
						  uint64_t *bdfid)
{
	rsmi_status_t rc = check(dv, bdfid);

	if (rc == RSMI_STATUS_SUCCESS)
		*bdfid = (uint64_t)(0x10 + dv) << 8;
	return rc;
}

VSIM_SMI_EXPORT rsmi_status_t rsmi_dev_unique_id_get(uint32_t dv,
						     uint64_t *id)
{
	rsmi_status_t rc = check(dv, id);
	CUuuid u;

	if (rc != RSMI_STATUS_SUCCESS)
		return rc;
	vsim_device_uuid_make(cfg.name, (int)dv, &u);
	*id = 0;
	for (int i = 0; i < 8; i++)
		*id = *id << 8 | (unsigned char)u.bytes[i];
	return RSMI_STATUS_SUCCESS;
}

/* The device's capacity and what all its processes use, VRAM only. */
static rsmi_status_t vram(uint32_t dv, rsmi_memory_type_t type,
			  const uint64_t *out, uint64_t *total,
			  uint64_t *used)
{
	rsmi_status_t rc = check(dv, out);

	if (rc != RSMI_STATUS_SUCCESS)
		return rc;
	if (type != RSMI_MEM_TYPE_VRAM)
		return (unsigned)type <= RSMI_MEM_TYPE_LAST
			       ? RSMI_STATUS_NOT_SUPPORTED
			       : RSMI_STATUS_INVALID_ARGS;
	if (vsim_state_peek(cfg.state_dir, (int)dv, cfg.memory, total,
			    used) != CUDA_SUCCESS)
		return RSMI_STATUS_UNKNOWN_ERROR;
	if (*used > *total)
		*used = *total;
	return RSMI_STATUS_SUCCESS;
}

VSIM_SMI_EXPORT rsmi_status_t rsmi_dev_memory_total_get(uint32_t dv,
		rsmi_memory_type_t type, uint64_t *total)
{
	uint64_t t, u;
	rsmi_status_t rc = vram(dv, type, total, &t, &u);

	if (rc == RSMI_STATUS_SUCCESS)
		*total = t;
	return rc;
}

VSIM_SMI_EXPORT rsmi_status_t rsmi_dev_memory_usage_get(uint32_t dv,
		rsmi_memory_type_t type, uint64_t *used)
{
	uint64_t t, u;
	rsmi_status_t rc = vram(dv, type, used, &t, &u);

	if (rc == RSMI_STATUS_SUCCESS)
		*used = u;
	return rc;
}
