/* ops_obj.c - the families of objects with a life of several steps: VMM
 * handles and their mappings, graphs with memory nodes (built, or captured),
 * arrays, mipmapped arrays, contexts and green contexts. Each step takes
 * one valid transition at random, so every release order comes up.
 */
#include "diff.h"

enum {
	S_MAPPED = 1u << 0,	/* VMM: the handle is mapped at ptr */
	S_ACCESS = 1u << 1,	/* VMM: ... and accessible */
	S_GRAPH = 1u << 2,	/* the graph is alive */
	S_EXEC = 1u << 3,	/* its executable graph is alive */
	S_LEAKY = 1u << 4,	/* an allocation node without a free node */
	S_ORPHAN = 1u << 5,	/* a green context's buffers, it destroyed */
};

bool diff_have(const char *name)
{
	CUdriverProcAddressQueryResult st;
	void *fn = NULL;

	return cuGetProcAddress(name, &fn, 13000, 0, &st) == CUDA_SUCCESS &&
	       fn && st == CU_GET_PROC_ADDRESS_SUCCESS;
}

/* ---- VMM --------------------------------------------------------------------- */

static CUmemAllocationProp vmm_prop(void)
{
	return (CUmemAllocationProp){
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { CU_MEM_LOCATION_TYPE_DEVICE, diff_proc.dev },
	};
}

void diff_vmm_make(struct diff_thread *t)
{
	CUmemAllocationProp prop = vmm_prop();
	size_t size = (diff_size(t) + DIFF_GRAN - 1) & ~(DIFF_GRAN - 1);
	CUmemGenericAllocationHandle h;
	struct diff_obj *o;

	if (diff_cu(t, cuMemCreate(&h, size, &prop, 0), true,
		    "cuMemCreate(%zu)", size))
		return;
	o = diff_obj_new(t, DIFF_F_VMM);
	if (!o)
		return;
	o->handle = h;
	o->handle_refs = 1;
	o->size = size;
	diff_trace(t, "  = #%d", o->id);
	diff_obj_put(o);
}

static void vmm_map(struct diff_thread *t, struct diff_obj *o)
{
	if (!o->ptr) {
		diff_cu(t, cuMemAddressReserve(&o->ptr, o->size, 0, 0, 0), false,
			"cuMemAddressReserve(#%d, %zu)", o->id, o->size);
		return;
	}
	if (!diff_cu(t, cuMemMap(o->ptr, o->size, 0, o->handle, 0), false,
		     "cuMemMap(#%d)", o->id))
		o->state |= S_MAPPED;
}

static void vmm_access(struct diff_thread *t, struct diff_obj *o)
{
	CUmemAccessDesc d = {
		.location = { CU_MEM_LOCATION_TYPE_DEVICE, diff_proc.dev },
		.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	};

	if (!diff_cu(t, cuMemSetAccess(o->ptr, o->size, &d, 1), false,
		     "cuMemSetAccess(#%d)", o->id))
		o->state |= S_ACCESS;
}

static void vmm_retain(struct diff_thread *t, struct diff_obj *o)
{
	CUmemGenericAllocationHandle h = 0;
	void *at = (void *)(uintptr_t)(o->ptr + diff_below(t, o->size));

	if (diff_cu(t, cuMemRetainAllocationHandle(&h, at), false,
		    "cuMemRetainAllocationHandle(#%d)", o->id))
		return;
	if (h != o->handle)
		diff_fail(t, "cuMemRetainAllocationHandle(#%d) gave another "
			  "handle", o->id);
	o->handle_refs++;
}

static void vmm_release(struct diff_thread *t, struct diff_obj *o)
{
	diff_cu(t, cuMemRelease(o->handle), false,
		"cuMemRelease(#%d, %s, %d refs)", o->id,
		o->state & S_MAPPED ? "mapped" : "unmapped", o->handle_refs);
	o->handle_refs--;
}

static void vmm_unmap(struct diff_thread *t, struct diff_obj *o)
{
	diff_cu(t, cuMemUnmap(o->ptr, o->size), false, "cuMemUnmap(#%d)",
		o->id);
	o->state &= ~(S_MAPPED | S_ACCESS);
}

static void vmm_free_va(struct diff_thread *t, struct diff_obj *o)
{
	diff_cu(t, cuMemAddressFree(o->ptr, o->size), false,
		"cuMemAddressFree(#%d)", o->id);
	o->ptr = 0;
}

/* Transitions: 0 reserve/map, 1 access, 2 retain, 3 release, 4 unmap,
 * 5 free the range; the first three only while not finishing. */
bool diff_vmm_step(struct diff_thread *t, struct diff_obj *o)
{
	bool mapped = o->state & S_MAPPED;
	bool ok[6] = {
		!t->finishing && !mapped && o->handle_refs > 0,
		!t->finishing && mapped && !(o->state & S_ACCESS),
		!t->finishing && mapped,
		o->handle_refs > 0,
		mapped,
		o->ptr && !mapped,
	};
	int n = 0, pick, k;

	for (k = 0; k < 6; k++)
		n += ok[k];
	if (n == 0)
		goto out_done;
	pick = (int)diff_below(t, (uint64_t)n);
	for (k = 0; k < 6 && (!ok[k] || pick-- > 0); k++)
		;
	switch (k) {
	case 0: vmm_map(t, o); break;
	case 1: vmm_access(t, o); break;
	case 2: vmm_retain(t, o); break;
	case 3: vmm_release(t, o); break;
	case 4: vmm_unmap(t, o); break;
	case 5: vmm_free_va(t, o); break;
	}
	if (o->handle_refs > 0 || o->ptr)
		return false;
out_done:
	diff_obj_drop(o);
	return true;
}

/* ---- graphs -------------------------------------------------------------- */

static bool add_alloc(struct diff_thread *t, struct diff_obj *o,
		      CUgraphNode *last, int *nodes)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p = {
		.poolProps = {
			.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
			.location = { CU_MEM_LOCATION_TYPE_DEVICE,
				      diff_proc.dev },
		},
		.bytesize = diff_size(t),
	};
	CUgraphNode n, f;

	if (diff_cu(t, cuGraphAddMemAllocNode(&n, o->graph, *nodes ? last : NULL,
					      *nodes ? 1 : 0, &p), true,
		    "cuGraphAddMemAllocNode(#%d, %zu)", o->id, p.bytesize))
		return false;
	*last = n;
	(*nodes)++;
	if (diff_chance(t, 25)) {
		o->state |= S_LEAKY;
		return true;
	}
	if (!diff_cu(t, cuGraphAddMemFreeNode(&f, o->graph, last, 1, p.dptr),
		     false, "cuGraphAddMemFreeNode(#%d)", o->id))
		*last = f;
	return true;
}

void diff_graph_make(struct diff_thread *t)
{
	struct diff_obj *o = diff_obj_new(t, DIFF_F_GRAPH);
	int k = 1 + (int)diff_below(t, 3), nodes = 0;
	CUgraphNode last = NULL;

	if (!o)
		return;
	if (diff_cu(t, cuGraphCreate(&o->graph, 0), false, "cuGraphCreate()")) {
		diff_obj_drop(o);
		return;
	}
	o->state = S_GRAPH;
	for (int i = 0; i < k; i++)
		add_alloc(t, o, &last, &nodes);
	diff_trace(t, "  = graph #%d (%d allocation nodes%s)", o->id, nodes,
		   o->state & S_LEAKY ? ", some not freed in it" : "");
	diff_obj_put(o);
}

/* cuMemAllocAsync (and some cuMemFreeAsync) captured into a graph. */
void diff_capture_make(struct diff_thread *t)
{
	struct diff_obj *o = diff_obj_new(t, DIFF_F_CAPTURE);
	CUstream s = t->capture_stream;
	int k = 1 + (int)diff_below(t, 3);

	if (!o)
		return;
	if (!s && diff_cu(t, cuStreamCreate(&t->capture_stream,
					    CU_STREAM_NON_BLOCKING), false,
			  "cuStreamCreate(capture)")) {
		diff_obj_drop(o);
		return;
	}
	s = t->capture_stream;
	diff_cu(t, cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
		false, "cuStreamBeginCapture()");
	for (int i = 0; i < k; i++) {
		size_t size = diff_size(t);
		CUdeviceptr p = 0;
		if (diff_cu(t, cuMemAllocAsync(&p, size, s), true,
			    "captured cuMemAllocAsync(%zu)", size))
			continue;
		if (diff_chance(t, 25))
			o->state |= S_LEAKY;
		else
			diff_cu(t, cuMemFreeAsync(p, s), false,
				"captured cuMemFreeAsync()");
	}
	if (diff_cu(t, cuStreamEndCapture(s, &o->graph), false,
		    "cuStreamEndCapture()")) {
		diff_obj_drop(o);
		return;
	}
	o->state |= S_GRAPH;
	diff_trace(t, "  = captured graph #%d", o->id);
	diff_obj_put(o);
}

static void graph_instantiate(struct diff_thread *t, struct diff_obj *o)
{
	unsigned long long flags = o->state & S_LEAKY
		? CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH : 0;

	if (!diff_cu(t, cuGraphInstantiateWithFlags(&o->exec, o->graph, flags),
		     true, "cuGraphInstantiate(#%d, flags %llu)", o->id, flags))
		o->state |= S_EXEC;
}

static void graph_launch(struct diff_thread *t, struct diff_obj *o)
{
	CUstream s = diff_proc.streams[diff_below(t, 2)];

	diff_cu(t, cuGraphLaunch(o->exec, s), true, "cuGraphLaunch(#%d, s%d)",
		o->id, s == diff_proc.streams[1]);
	if (diff_chance(t, 50))
		diff_cu(t, cuStreamSynchronize(s), false,
			"cuStreamSynchronize()");
}

/* Transitions: 0 instantiate, 1 launch, 2 trim graph memory (not when
 * finishing); 3 destroy the graph, 4 destroy the executable graph. */
bool diff_graph_step(struct diff_thread *t, struct diff_obj *o)
{
	bool g = o->state & S_GRAPH, x = o->state & S_EXEC;
	bool ok[5] = { !t->finishing && g && !x, !t->finishing && x,
		       !t->finishing, g, x };
	int n = 0, pick, k;

	for (k = 0; k < 5; k++)
		n += ok[k] * (k == 1 ? 3 : 1);
	pick = (int)diff_below(t, (uint64_t)n);
	for (k = 0; k < 5; k++) {
		pick -= ok[k] * (k == 1 ? 3 : 1);
		if (pick < 0)
			break;
	}
	switch (k) {
	case 0: graph_instantiate(t, o); break;
	case 1: graph_launch(t, o); break;
	case 2: diff_cu(t, cuDeviceGraphMemTrim(diff_proc.dev), false,
			"cuDeviceGraphMemTrim()"); break;
	case 3: diff_cu(t, cuGraphDestroy(o->graph), false,
			"cuGraphDestroy(#%d%s)", o->id,
			x ? ", its exec alive" : "");
		o->state &= ~S_GRAPH; break;
	case 4: diff_cu(t, cuGraphExecDestroy(o->exec), false,
			"cuGraphExecDestroy(#%d%s)", o->id,
			g ? ", its graph alive" : "");
		o->state &= ~S_EXEC; break;
	}
	if (o->state & (S_GRAPH | S_EXEC))
		return false;
	diff_obj_drop(o);
	return true;
}

/* ---- arrays ---------------------------------------------------------------- */

static const CUarray_format formats[] = {
	CU_AD_FORMAT_UNSIGNED_INT8, CU_AD_FORMAT_UNSIGNED_INT16,
	CU_AD_FORMAT_HALF, CU_AD_FORMAT_FLOAT,
};

/* A 3D shape: ordinary, or narrow (a few bytes wide, tall and deep). */
static CUDA_ARRAY3D_DESCRIPTOR shape3d(struct diff_thread *t)
{
	CUDA_ARRAY3D_DESCRIPTOR d = {
		.Format = formats[diff_below(t, 4)],
		.NumChannels = 1u << diff_below(t, 3),
	};

	if (diff_chance(t, 30)) {
		d.Width = 1 + diff_below(t, 4);
		d.Height = diff_chance(t, 30) ? 16384 : 1 + diff_below(t, 4096);
		d.Depth = 1 + diff_below(t, 128);
		if (diff_chance(t, 50)) {
			d.Format = CU_AD_FORMAT_UNSIGNED_INT8;
			d.NumChannels = 1;
		}
		return d;
	}
	d.Width = 1 + diff_below(t, 512);
	d.Height = diff_below(t, 256);
	d.Depth = d.Height ? diff_below(t, 32) : 0;
	return d;
}

void diff_array_make(struct diff_thread *t)
{
	struct diff_obj *o;
	CUarray a;
	CUresult rc;

	if (diff_chance(t, 40)) {
		CUDA_ARRAY_DESCRIPTOR d = {
			.Width = 1 + diff_below(t, 4096),
			.Height = diff_below(t, 1024),
			.Format = formats[diff_below(t, 4)],
			.NumChannels = 1u << diff_below(t, 3),
		};
		rc = diff_cu(t, cuArrayCreate(&a, &d), true,
			     "cuArrayCreate(%zux%zu, fmt %d x%u)", d.Width,
			     d.Height, (int)d.Format, d.NumChannels);
	} else {
		CUDA_ARRAY3D_DESCRIPTOR d = shape3d(t);
		rc = diff_cu(t, cuArray3DCreate(&a, &d), true,
			     "cuArray3DCreate(%zux%zux%zu, fmt %d x%u)", d.Width,
			     d.Height, d.Depth, (int)d.Format, d.NumChannels);
	}
	if (rc || !(o = diff_obj_new(t, DIFF_F_ARRAY)))
		return;
	o->array = a;
	diff_trace(t, "  = #%d", o->id);
	diff_obj_put(o);
}

void diff_mipmap_make(struct diff_thread *t)
{
	CUDA_ARRAY3D_DESCRIPTOR d = shape3d(t);
	unsigned levels = 1 + (unsigned)diff_below(t, 6);
	struct diff_obj *o;
	CUmipmappedArray m;

	if (diff_cu(t, cuMipmappedArrayCreate(&m, &d, levels), true,
		    "cuMipmappedArrayCreate(%zux%zux%zu, fmt %d x%u, %u levels)",
		    d.Width, d.Height, d.Depth, (int)d.Format, d.NumChannels,
		    levels) || !(o = diff_obj_new(t, DIFF_F_MIPMAP)))
		return;
	o->mipmap = m;
	diff_trace(t, "  = #%d", o->id);
	diff_obj_put(o);
}

bool diff_array_step(struct diff_thread *t, struct diff_obj *o)
{
	if (o->fam == DIFF_F_ARRAY)
		diff_cu(t, cuArrayDestroy(o->array), false,
			"cuArrayDestroy(#%d)", o->id);
	else
		diff_cu(t, cuMipmappedArrayDestroy(o->mipmap), false,
			"cuMipmappedArrayDestroy(#%d)", o->id);
	diff_obj_drop(o);
	return true;
}

/* ---- contexts and green contexts ------------------------------------------- */

/* CUDA 13's cuda.h declares only the newest cuCtxCreate; the old ABI is
 * still exported (and hooked). */
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags,
				CUdevice dev);

void diff_ctx_make(struct diff_thread *t)
{
	struct diff_obj *o = diff_obj_new(t, DIFF_F_CTX);
	bool v2 = diff_chance(t, 50);
	CUcontext popped;
	CUresult rc;

	if (!o)
		return;
	/* Two hooks: the old signature and CUDA 13's. */
	rc = v2 ? cuCtxCreate_v2(&o->ctx, 0, diff_proc.dev)
		: cuCtxCreate(&o->ctx, NULL, 0, diff_proc.dev);
	if (diff_cu(t, rc, true, "cuCtxCreate_v%d()", v2 ? 2 : 4)) {
		diff_obj_drop(o);
		return;
	}
	diff_cu(t, cuCtxPopCurrent(&popped), false, "cuCtxPopCurrent()");
	diff_trace(t, "  = context #%d", o->id);
	diff_obj_put(o);
}

void diff_green_make(struct diff_thread *t)
{
	CUdevResource res, group, rest;
	CUdevResourceDesc desc;
	struct diff_obj *o;
	unsigned n = 1, sms = 8u << diff_below(t, 3);

	if (diff_cu(t, cuDeviceGetDevResource(diff_proc.dev, &res,
					      CU_DEV_RESOURCE_TYPE_SM), false,
		    "cuDeviceGetDevResource()") ||
	    diff_cu(t, cuDevSmResourceSplitByCount(&group, &n, &res, &rest, 0,
						   sms), false,
		    "cuDevSmResourceSplitByCount(%u)", sms) ||
	    diff_cu(t, cuDevResourceGenerateDesc(&desc, &group, 1), false,
		    "cuDevResourceGenerateDesc()"))
		return;
	o = diff_obj_new(t, DIFF_F_GREEN);
	if (!o)
		return;
	if (diff_cu(t, cuGreenCtxCreate(&o->green, desc, diff_proc.dev,
					CU_GREEN_CTX_DEFAULT_STREAM), true,
		    "cuGreenCtxCreate(%u SMs)", sms) ||
	    diff_cu(t, cuCtxFromGreenCtx(&o->ctx, o->green), false,
		    "cuCtxFromGreenCtx()")) {
		diff_obj_drop(o);
		return;
	}
	diff_trace(t, "  = green context #%d", o->id);
	diff_obj_put(o);
}

static void ctx_alloc(struct diff_thread *t, struct diff_obj *o)
{
	size_t size = diff_size(t);
	CUcontext popped;
	CUdeviceptr p;

	if (diff_cu(t, cuCtxPushCurrent(o->ctx), false, "cuCtxPushCurrent(#%d)",
		    o->id))
		return;
	if (!diff_cu(t, cuMemAlloc(&p, size), true, "cuMemAlloc(%zu) in #%d",
		     size, o->id))
		o->buf[o->nbuf++] = p;
	diff_cu(t, cuCtxPopCurrent(&popped), false, "cuCtxPopCurrent()");
}

static void ctx_free(struct diff_thread *t, struct diff_obj *o)
{
	int i = (int)diff_below(t, (uint64_t)o->nbuf);

	diff_cu(t, cuMemFree(o->buf[i]), false, "cuMemFree(buffer %d of #%d)",
		i, o->id);
	o->buf[i] = o->buf[--o->nbuf];
}

/* A green context's end: its buffers stay (the primary context's), now
 * an orphan object freed later. */
static void green_destroy(struct diff_thread *t, struct diff_obj *o)
{
	diff_cu(t, cuGreenCtxDestroy(o->green), false,
		"cuGreenCtxDestroy(#%d, %d buffers live)", o->id, o->nbuf);
	o->green = NULL;
	o->ctx = NULL;
	o->state |= S_ORPHAN;
}

bool diff_ctx_step(struct diff_thread *t, struct diff_obj *o)
{
	unsigned r = (unsigned)diff_below(t, 100);

	if (o->state & S_ORPHAN) {
		if (o->nbuf)
			ctx_free(t, o);
	} else if (!t->finishing && r < 50 && o->nbuf < 8) {
		ctx_alloc(t, o);
	} else if (o->nbuf && r < 75) {
		ctx_free(t, o);
	} else if (o->fam == DIFF_F_GREEN) {
		green_destroy(t, o);
	} else {
		diff_cu(t, cuCtxDestroy(o->ctx), false,
			"cuCtxDestroy(#%d, %d buffers live)", o->id, o->nbuf);
		o->ctx = NULL;
		o->nbuf = 0;
	}
	if (o->ctx || o->nbuf)
		return false;
	diff_obj_drop(o);
	return true;
}

/* ---- the table of families ----------------------------------------------- */

static bool always(void)
{
	return true;
}

static bool have_capture(void)
{
	return diff_have("cuStreamBeginCapture");
}

static bool have_green(void)
{
	return diff_have("cuGreenCtxCreate");
}

const struct diff_family_ops diff_families[DIFF_F_COUNT] = {
	[DIFF_F_BUF] = { "buf", always, diff_buf_make, diff_mem_step },
	[DIFF_F_PITCH] = { "pitch", always, diff_pitch_make, diff_mem_step },
	[DIFF_F_MANAGED] = { "managed", always, diff_managed_make,
			     diff_mem_step },
	[DIFF_F_ASYNC] = { "async", always, diff_async_make, diff_mem_step },
	[DIFF_F_POOL] = { "pool", always, diff_pool_make, diff_pool_step },
	[DIFF_F_VMM] = { "vmm", always, diff_vmm_make, diff_vmm_step },
	[DIFF_F_GRAPH] = { "graph", always, diff_graph_make, diff_graph_step },
	[DIFF_F_CAPTURE] = { "capture", have_capture, diff_capture_make,
			     diff_graph_step },
	[DIFF_F_ARRAY] = { "array", always, diff_array_make, diff_array_step },
	[DIFF_F_MIPMAP] = { "mipmap", always, diff_mipmap_make,
			    diff_array_step },
	[DIFF_F_CTX] = { "ctx", always, diff_ctx_make, diff_ctx_step },
	[DIFF_F_GREEN] = { "green", have_green, diff_green_make,
			   diff_ctx_step },
	[DIFF_F_SHARE] = { "share", always, diff_share_make, diff_share_step,
			   diff_share_poll },
};
