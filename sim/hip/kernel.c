/* kernel.c - HIP device code on the simulated device: registration,
 * modules and launches.
 *
 * A HIP program's fat binaries (__hipRegisterFatBinary) and the images of
 * hipModuleLoadData are read by codeobj.c for each kernel's name and the
 * offsets and sizes of its explicit arguments. The simulated driver binds
 * kernels to host forms by name (kernels/host.c), and takes a kernel from
 * PTX: so each code object becomes, per device, a PTX module declaring its
 * kernels with a parameter list of the same layout (padding parameters
 * where the alignment alone would not place an argument), and a launch
 * packs the arguments at the metadata's offsets into one buffer handed to
 * cuLaunchKernel. The launch then runs as a CUDA launch does: the engine,
 * the record, and a kernel with no host form said once and waited out.
 *
 * AMDGPU places explicit arguments at their natural alignment, as nvcc
 * does, so the host forms' offsets hold for both front ends (checked by
 * tests/hip's code object test); no repacking is needed.
 */
#include "hip_sim.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IMAGE_LIMIT ((size_t)1 << 40)   /* registered images are trusted */
#define CONFIG_DEPTH 16
#define PARAM_STACK 4096

/* One code object: registered, or loaded by hipModuleLoadData. */
struct ihipModule_t {
	pthread_mutex_t lock;
	const void *image;
	size_t size;
	bool parsed;
	int parse_rc;
	struct vhip_codeobj co;
	CUmodule mod[VHIP_MAX_DEVICES];
	struct ihipModuleSymbol_t *funcs;  /* hipModuleGetFunction's */
};

/* One kernel of a code object, and its CUfunction on each device. */
struct ihipModuleSymbol_t {
	struct ihipModule_t *code;
	const void *stub;                  /* registered: its host stub */
	char *name;
	CUfunction f[VHIP_MAX_DEVICES];
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ihipModuleSymbol_t **registered;
static size_t nregistered, reg_cap;

/* ---- code objects as PTX ---------------------------------------------------- */

static bool ptx_name_ok(const char *s)
{
	if (!*s || (*s >= '0' && *s <= '9'))
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '_' || *s == '$'))
			return false;
	return true;
}

/* The largest power of two (at most 8) that divides off. */
static uint32_t align_of(uint32_t off)
{
	uint32_t a = 8;

	while (a > 1 && off % a)
		a /= 2;
	return a;
}

/* Appends one kernel's .entry; false when its layout cannot be written
 * (overlapping arguments) or the buffer is full. */
static bool ptx_entry(char *buf, size_t cap, size_t *len,
		      const struct vhip_kernel *k)
{
	uint32_t pos = 0;
	int n;

	n = snprintf(buf + *len, cap - *len, ".visible .entry %s(", k->name);
	if (n < 0 || (size_t)n >= cap - *len)
		return false;
	*len += (size_t)n;
	for (uint32_t i = 0; i < k->nargs; i++) {
		const struct vhip_arg *a = &k->args[i];
		uint32_t al = align_of(a->offset);
		const char *sep = i ? "," : "";

		if (a->offset < pos || !a->size)
			return false;
		if (((pos + al - 1) & ~(al - 1)) != a->offset) {
			n = snprintf(buf + *len, cap - *len,
				     "%s.param .b8 pad%u[%u]", sep, i,
				     a->offset - pos);
			if (n < 0 || (size_t)n >= cap - *len)
				return false;
			*len += (size_t)n;
			sep = ",";
		}
		n = snprintf(buf + *len, cap - *len,
			     "%s.param .align %u .b8 p%u[%u]", sep, al, i,
			     a->size);
		if (n < 0 || (size_t)n >= cap - *len)
			return false;
		*len += (size_t)n;
		pos = a->offset + a->size;
	}
	n = snprintf(buf + *len, cap - *len, ")\n{\n\tret;\n}\n");
	if (n < 0 || (size_t)n >= cap - *len)
		return false;
	*len += (size_t)n;
	return true;
}

/* The PTX text of a code object's kernels (those PTX can name); the
 * caller frees it. */
static char *ptx_of(const struct vhip_codeobj *co)
{
	size_t cap = 128, len;
	char *buf;

	for (uint32_t i = 0; i < co->nkernels; i++)
		cap += 64 + strlen(co->kernels[i].name) +
		       48ull * (2ull * co->kernels[i].nargs);
	buf = malloc(cap);
	if (!buf)
		return NULL;
	len = (size_t)snprintf(buf, cap, ".version 7.0\n.target sm_50\n"
			       ".address_size 64\n");
	for (uint32_t i = 0; i < co->nkernels; i++) {
		size_t at = len;

		if (!ptx_name_ok(co->kernels[i].name) ||
		    !ptx_entry(buf, cap, &len, &co->kernels[i])) {
			len = at;              /* left out: not launchable */
			buf[len] = 0;
		}
	}
	return buf;
}

static hipError_t code_parse(struct ihipModule_t *c)
{
	char err[160];

	if (!c->parsed) {
		c->parse_rc = vhip_codeobj_parse(c->image, c->size, vhip_arch,
						 &c->co, err, sizeof(err));
		if (c->parse_rc != 0)
			fprintf(stderr, "vgpu-sim-hip: %s\n", err);
		c->parsed = true;
	}
	return c->parse_rc ? hipErrorInvalidImage : hipSuccess;
}

/* The code object's module on the current device, loaded on first use. */
static hipError_t code_module(struct ihipModule_t *c, CUmodule *out)
{
	int dev = vhip_device();
	hipError_t e;
	char *ptx;

	pthread_mutex_lock(&c->lock);
	e = code_parse(c);
	if (e == hipSuccess && !c->mod[dev]) {
		ptx = ptx_of(&c->co);
		e = ptx ? vhip_result(cuModuleLoadData(&c->mod[dev], ptx)) :
		    hipErrorOutOfMemory;
		free(ptx);
	}
	*out = c->mod[dev];
	pthread_mutex_unlock(&c->lock);
	return e;
}

static hipError_t func_resolve(struct ihipModuleSymbol_t *fn, CUfunction *out,
			       const struct vhip_kernel **k)
{
	int dev = vhip_device();
	CUmodule m;
	hipError_t e = code_module(fn->code, &m);

	if (e != hipSuccess)
		return vhip_error(e);
	*k = vhip_codeobj_find(&fn->code->co, fn->name);
	if (!*k)
		return vhip_error(hipErrorInvalidDeviceFunction);
	if (!fn->f[dev] &&
	    cuModuleGetFunction(&fn->f[dev], m, fn->name) != CUDA_SUCCESS)
		return vhip_error(hipErrorInvalidDeviceFunction);
	*out = fn->f[dev];
	return hipSuccess;
}

/* ---- launches ---------------------------------------------------------------- */

/* Packs args (one pointer per explicit argument) at the metadata's offsets
 * and launches. */
static hipError_t launch_packed(CUfunction f, const struct vhip_kernel *k,
				dim3 grid, dim3 block, void **args,
				unsigned shared, hipStream_t s)
{
	unsigned char stack[PARAM_STACK];
	unsigned char *buf = stack;
	size_t size = k->explicit_bytes;
	void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, NULL,
			  CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
			  CU_LAUNCH_PARAM_END };
	hipError_t e;

	if (k->nargs && !args)
		return vhip_error(hipErrorInvalidValue);
	if (size > sizeof(stack) && !(buf = calloc(1, size)))
		return vhip_error(hipErrorOutOfMemory);
	memset(buf, 0, size < sizeof(stack) ? size : 0);
	for (uint32_t i = 0; i < k->nargs; i++) {
		if (!args[i]) {
			e = vhip_error(hipErrorInvalidValue);
			goto out;
		}
		memcpy(buf + k->args[i].offset, args[i], k->args[i].size);
	}
	extra[1] = buf;
	e = vhip_result(cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x,
				       block.y, block.z, shared, (CUstream)s,
				       NULL, extra));
out:
	if (buf != stack)
		free(buf);
	return e;
}

static struct ihipModuleSymbol_t *stub_find(const void *stub)
{
	struct ihipModuleSymbol_t *fn = NULL;

	pthread_mutex_lock(&reg_lock);
	for (size_t i = 0; i < nregistered && !fn; i++)
		if (registered[i]->stub == stub)
			fn = registered[i];
	pthread_mutex_unlock(&reg_lock);
	return fn;
}

static hipError_t launch_stub(const void *stub, dim3 grid, dim3 block,
			      void **args, size_t shared, hipStream_t s)
{
	struct ihipModuleSymbol_t *fn;
	const struct vhip_kernel *k;
	hipError_t e = vhip_enter();
	CUfunction f;

	if (e != hipSuccess)
		return e;
	fn = stub_find(stub);
	if (!fn)
		return vhip_error(hipErrorInvalidDeviceFunction);
	e = func_resolve(fn, &f, &k);
	if (e != hipSuccess)
		return e;
	return launch_packed(f, k, grid, block, args, (unsigned)shared, s);
}

VHIP_EXPORT hipError_t hipLaunchKernel(const void *stub, dim3 grid,
				       dim3 block, void **args, size_t shared,
				       hipStream_t s)
{
	return launch_stub(stub, grid, block, args, shared, s);
}

VHIP_EXPORT hipError_t hipLaunchCooperativeKernel(const void *stub, dim3 grid,
						  dim3 block, void **args,
						  unsigned int shared,
						  hipStream_t s)
{
	return launch_stub(stub, grid, block, args, shared, s);
}

/* The per-thread default stream's entries: the null stream is the
 * thread's (the driver's CU_STREAM_PER_THREAD, hipStreamPerThread). */
VHIP_EXPORT hipError_t hipLaunchKernel_spt(const void *stub, dim3 grid,
					   dim3 block, void **args,
					   size_t shared, hipStream_t s)
{
	return launch_stub(stub, grid, block, args, shared,
			   s ? s : hipStreamPerThread);
}

VHIP_EXPORT hipError_t hipLaunchCooperativeKernel_spt(const void *stub,
						      dim3 grid, dim3 block,
						      void **args,
						      uint32_t shared,
						      hipStream_t s)
{
	return launch_stub(stub, grid, block, args, shared,
			   s ? s : hipStreamPerThread);
}

/* Each device's kernel on its stream, in order (one device here: the
 * kernels are not made to run together). */
static hipError_t launch_list(hipLaunchParams *l, int n)
{
	hipError_t e = hipSuccess;

	if (!l || n <= 0)
		return vhip_error(hipErrorInvalidValue);
	for (int i = 0; i < n && e == hipSuccess; i++)
		e = launch_stub(l[i].func, l[i].gridDim, l[i].blockDim,
				l[i].args, l[i].sharedMem, l[i].stream);
	return e;
}

VHIP_EXPORT hipError_t hipLaunchCooperativeKernelMultiDevice(
	hipLaunchParams *l, int n, unsigned int flags)
{
	(void)flags;
	return launch_list(l, n);
}

VHIP_EXPORT hipError_t hipExtLaunchMultiKernelMultiDevice(hipLaunchParams *l,
							  int n,
							  unsigned int flags)
{
	(void)flags;
	return launch_list(l, n);
}

VHIP_EXPORT hipError_t hipExtLaunchKernel(const void *stub, dim3 grid,
					  dim3 block, void **args,
					  size_t shared, hipStream_t s,
					  hipEvent_t start, hipEvent_t stop,
					  int flags)
{
	hipError_t e = hipSuccess;

	(void)flags;
	if (start)
		e = hipEventRecord(start, s);
	if (e == hipSuccess)
		e = launch_stub(stub, grid, block, args, shared, s);
	if (e == hipSuccess && stop)
		e = hipEventRecord(stop, s);
	return e;
}

/* ---- the launch configuration of <<<...>>> ------------------------------ */

static _Thread_local struct {
	dim3 grid, block;
	size_t shared;
	hipStream_t stream;
} configs[CONFIG_DEPTH];
static _Thread_local unsigned nconfigs;

VHIP_EXPORT hipError_t __hipPushCallConfiguration(dim3 grid, dim3 block,
						  size_t shared, hipStream_t s)
{
	if (nconfigs == CONFIG_DEPTH)
		return vhip_error(hipErrorInvalidConfiguration);
	configs[nconfigs].grid = grid;
	configs[nconfigs].block = block;
	configs[nconfigs].shared = shared;
	configs[nconfigs].stream = s;
	nconfigs++;
	return hipSuccess;
}

VHIP_EXPORT hipError_t __hipPopCallConfiguration(dim3 *grid, dim3 *block,
						 size_t *shared, hipStream_t *s)
{
	if (!nconfigs)
		return vhip_error(hipErrorMissingConfiguration);
	nconfigs--;
	*grid = configs[nconfigs].grid;
	*block = configs[nconfigs].block;
	*shared = configs[nconfigs].shared;
	*s = configs[nconfigs].stream;
	return hipSuccess;
}

/* ---- registration (the program's constructors) --------------------------- */

/* What .hipFatBinSegment holds: __hipRegisterFatBinary's argument. */
struct fatbin_wrapper {
	uint32_t magic;                   /* "HIPF" */
	uint32_t version;
	const void *binary;               /* the offload bundle */
	void *unused;
};

#define FATBIN_MAGIC 0x48495046u

static struct ihipModule_t *code_new(const void *image, size_t size)
{
	struct ihipModule_t *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	pthread_mutex_init(&c->lock, NULL);
	c->image = image;
	c->size = size;
	return c;
}

/* Nothing is parsed or loaded here (before main, maybe before the driver
 * could start): the first launch does it. */
VHIP_EXPORT void **__hipRegisterFatBinary(const void *data)
{
	const struct fatbin_wrapper *w = data;

	if (!w || w->magic != FATBIN_MAGIC || !w->binary)
		return NULL;
	return (void **)code_new(w->binary,
				 vhip_image_size(w->binary, IMAGE_LIMIT));
}

VHIP_EXPORT void __hipRegisterFunction(void **handle, const void *stub,
				       char *host_name, const char *dev_name,
				       unsigned int thread_limit, void *tid,
				       void *bid, dim3 *block, dim3 *grid,
				       int *wsize)
{
	struct ihipModuleSymbol_t *fn;

	(void)host_name, (void)thread_limit, (void)tid, (void)bid;
	(void)block, (void)grid, (void)wsize;
	if (!handle || !stub || !dev_name)
		return;
	fn = calloc(1, sizeof(*fn));
	if (!fn || !(fn->name = strdup(dev_name)))
		goto fail;
	fn->code = (struct ihipModule_t *)handle;
	fn->stub = stub;
	pthread_mutex_lock(&reg_lock);
	if (nregistered == reg_cap) {
		size_t cap = reg_cap ? reg_cap * 2 : 64;
		void *grown = realloc(registered, cap * sizeof(*registered));

		if (!grown) {
			pthread_mutex_unlock(&reg_lock);
			goto fail;
		}
		registered = grown;
		reg_cap = cap;
	}
	registered[nregistered++] = fn;
	pthread_mutex_unlock(&reg_lock);
	return;
fail:
	if (fn)
		free(fn->name);
	free(fn);
}

/* Device variables live in device code the simulator does not run: the
 * host forms never read them. Nothing to register. */
VHIP_EXPORT void __hipRegisterVar(void **handle, void *var, char *host_var,
				  char *dev_var, int ext, size_t size,
				  int constant, int global)
{
	(void)handle, (void)var, (void)host_var, (void)dev_var;
	(void)ext, (void)size, (void)constant, (void)global;
}

/* At the program's exit: its modules go with the process (the driver's
 * teardown), so nothing is unloaded here. */
VHIP_EXPORT void __hipUnregisterFatBinary(void **handle)
{
	(void)handle;
}

/* ---- modules ------------------------------------------------------------------ */

VHIP_EXPORT hipError_t hipModuleLoadData(hipModule_t *out, const void *image)
{
	struct ihipModule_t *c;
	CUmodule m;
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!out || !image)
		return vhip_error(hipErrorInvalidValue);
	c = code_new(image, vhip_image_size(image, IMAGE_LIMIT));
	if (!c)
		return vhip_error(hipErrorOutOfMemory);
	e = code_module(c, &m);
	if (e == hipSuccess)
		c->funcs = calloc(c->co.nkernels ? c->co.nkernels : 1,
				  sizeof(*c->funcs));
	if (e == hipSuccess && !c->funcs)
		e = hipErrorOutOfMemory;
	if (e != hipSuccess) {
		vhip_codeobj_free(&c->co);
		free(c);
		return vhip_error(e);
	}
	for (uint32_t i = 0; i < c->co.nkernels; i++) {
		c->funcs[i].code = c;
		c->funcs[i].name = c->co.kernels[i].name;
	}
	*out = c;
	return hipSuccess;
}

VHIP_EXPORT hipError_t hipModuleGetFunction(hipFunction_t *out,
					    hipModule_t m, const char *name)
{
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!out || !m || !name)
		return vhip_error(hipErrorInvalidValue);
	for (uint32_t i = 0; i < m->co.nkernels; i++)
		if (strcmp(m->funcs[i].name, name) == 0) {
			*out = &m->funcs[i];
			return hipSuccess;
		}
	return vhip_error(hipErrorNotFound);
}

VHIP_EXPORT hipError_t hipModuleUnload(hipModule_t m)
{
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!m)
		return vhip_error(hipErrorInvalidHandle);
	for (int d = 0; d < VHIP_MAX_DEVICES; d++)
		if (m->mod[d])
			(void)cuModuleUnload(m->mod[d]);
	vhip_codeobj_free(&m->co);
	free(m->funcs);
	pthread_mutex_destroy(&m->lock);
	free(m);
	return hipSuccess;
}

/* extra: HIP's buffer form, its own markers (END is 3, not CUDA's 0). */
static hipError_t extra_buffer(void **extra, void **buf, size_t *size)
{
	*buf = NULL;
	*size = 0;
	for (unsigned i = 0; i < 64 && extra[i] != HIP_LAUNCH_PARAM_END; i += 2) {
		if (extra[i] == HIP_LAUNCH_PARAM_BUFFER_POINTER)
			*buf = extra[i + 1];
		else if (extra[i] == HIP_LAUNCH_PARAM_BUFFER_SIZE)
			*size = *(size_t *)extra[i + 1];
		else
			return hipErrorInvalidValue;
	}
	return *buf ? hipSuccess : hipErrorInvalidValue;
}

VHIP_EXPORT hipError_t hipModuleLaunchKernel(hipFunction_t fn,
	unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
	unsigned bz, unsigned shared, hipStream_t s, void **params,
	void **extra)
{
	const struct vhip_kernel *k;
	dim3 grid = { gx, gy, gz }, block = { bx, by, bz };
	void *buf, *cu_extra[5];
	size_t size;
	CUfunction f;
	hipError_t e = vhip_enter();

	if (e == hipSuccess && !fn)
		e = vhip_error(hipErrorInvalidResourceHandle);
	if (e == hipSuccess)
		e = func_resolve(fn, &f, &k);
	if (e != hipSuccess)
		return e;
	if (!extra || params)
		return launch_packed(f, k, grid, block, params, shared, s);
	if (extra_buffer(extra, &buf, &size) != hipSuccess ||
	    size < k->explicit_bytes)
		return vhip_error(hipErrorInvalidValue);
	size = k->explicit_bytes;      /* the hidden arguments are not read */
	cu_extra[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
	cu_extra[1] = buf;
	cu_extra[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
	cu_extra[3] = &size;
	cu_extra[4] = CU_LAUNCH_PARAM_END;
	return vhip_result(cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared,
					  (CUstream)s, NULL, cu_extra));
}

/* hip_ext.h's launch (a C++ name in the real library): sizes in
 * work-items, each a whole number of blocks; start and stop recorded
 * around it. */
VHIP_EXPORT hipError_t hipExtModuleLaunchKernel(hipFunction_t fn,
	uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx, uint32_t ly,
	uint32_t lz, size_t shared, hipStream_t s, void **params,
	void **extra, hipEvent_t start, hipEvent_t stop, uint32_t flags)
	__asm__("_Z24hipExtModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12"
		"ihipStream_tPPvS4_P11ihipEvent_tS6_j");

VHIP_EXPORT hipError_t hipExtModuleLaunchKernel(hipFunction_t fn,
	uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx, uint32_t ly,
	uint32_t lz, size_t shared, hipStream_t s, void **params,
	void **extra, hipEvent_t start, hipEvent_t stop, uint32_t flags)
{
	hipError_t e = hipSuccess;

	(void)flags;
	if (!lx || !ly || !lz || gx % lx || gy % ly || gz % lz)
		return vhip_error(hipErrorInvalidValue);
	if (start)
		e = hipEventRecord(start, s);
	if (e == hipSuccess)
		e = hipModuleLaunchKernel(fn, gx / lx, gy / ly, gz / lz, lx, ly,
					  lz, (unsigned)shared, s, params,
					  extra);
	if (e == hipSuccess && stop)
		e = hipEventRecord(stop, s);
	return e;
}

VHIP_EXPORT hipError_t hipHccModuleLaunchKernel(hipFunction_t fn,
	uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx, uint32_t ly,
	uint32_t lz, size_t shared, hipStream_t s, void **params,
	void **extra, hipEvent_t start, hipEvent_t stop)
	__asm__("_Z24hipHccModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12"
		"ihipStream_tPPvS4_P11ihipEvent_tS6_");

VHIP_EXPORT hipError_t hipHccModuleLaunchKernel(hipFunction_t fn,
	uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx, uint32_t ly,
	uint32_t lz, size_t shared, hipStream_t s, void **params,
	void **extra, hipEvent_t start, hipEvent_t stop)
{
	return hipExtModuleLaunchKernel(fn, gx, gy, gz, lx, ly, lz, shared, s,
					params, extra, start, stop, 0);
}
