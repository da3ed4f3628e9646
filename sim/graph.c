/* graph.c - CUDA graphs: empty, kernel, memset and memory nodes;
 * instantiation; launch; the device's graph memory pool. Stream capture
 * (capture.c) adds its nodes through the same functions.
 *
 * Nodes can only depend on nodes made before them, so creation order is a
 * topological order: an executable graph runs its nodes in that order, one
 * after another, as a single piece of work on the launch stream's worker.
 *
 * Graph memory, as CUDA documents it: an allocation node gets its address
 * when it is added (a mapping that costs no capacity and stays fixed for the
 * graph's life and every instantiation). The physical memory is reserved in
 * the device's graph pool when an executable graph is first launched (the
 * page-rounded sizes of all its allocation nodes, reserved in the shared
 * device state, so every process sees it, and CUDA_ERROR_OUT_OF_MEMORY when
 * it does not fit). The reservation stays after free nodes run, until
 * cuDeviceGraphMemTrim finds the graph idle with nothing allocated, or the
 * executable graph is destroyed. "Used" counts allocations between their
 * allocation node and their free node.
 */
#include "sim.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define GRAPH_MAGIC 0x47524131u
#define NODE_MAGIC 0x474e4f31u
#define EXEC_MAGIC 0x47455831u

/* One allocation node's memory: a fixed address range. */
struct gmem {
	uintptr_t base;
	size_t size, mapped;
	int device;
	int refs;                 /* the graph and its executable graphs */
};

struct CUgraphNode_st {
	uint32_t magic;
	struct CUgraph_st *graph;
	CUgraphNodeType type;
	size_t index;                    /* in the graph's nodes */
	struct vsim_launch *launch;      /* kernel */
	int device;                      /* kernel: where it runs */
	CUDA_MEM_ALLOC_NODE_PARAMS alloc;   /* mem alloc (accessDescs: ours) */
	CUDA_MEMSET_NODE_PARAMS memset;  /* memset */
	struct gmem *mem;                /* mem alloc and mem free */
	bool freed;                      /* mem alloc: a free node frees it */
};

struct CUgraph_st {
	uint32_t magic;
	struct CUgraphNode_st **nodes;
	size_t n, cap;
	bool has_mem_nodes;
	int execs;                       /* executable graphs alive */
};

struct exec_node {
	CUgraphNodeType type;
	struct vsim_launch *launch;
	int device;
	CUDA_MEMSET_NODE_PARAMS memset;
	size_t slot;                     /* memory nodes: index in mems */
};

struct CUgraphExec_st {
	uint32_t magic;
	struct CUgraph_st *graph;
	unsigned long long flags;
	struct exec_node *nodes;
	size_t n;
	struct gmem **mems;              /* one per allocation node */
	bool *live;                      /* allocated, not freed */
	size_t nmems;
	bool leaky;                      /* an allocation outlives a launch */
	size_t reserve[VSIM_MAX_DEVICES]; /* per device, of the memory nodes */
	bool backed, launched;
	int in_flight;
	struct CUstream_st *last_stream;
	uint64_t last_seq;
	struct CUgraphExec_st *next;     /* in the list of executable graphs */
};

/* The device's graph memory pool, per process. */
struct graph_pool {
	uint64_t used, used_high, reserved, reserved_high;
};

/* Guards every graph, node, executable graph and the pools. Never held
 * while a kernel runs or while waiting for a stream. */
static pthread_mutex_t graph_lock = PTHREAD_MUTEX_INITIALIZER;
static struct graph_pool pools[VSIM_MAX_DEVICES];
static struct CUgraphExec_st *execs;

static size_t page_round(size_t n)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return (n + page - 1) & ~(page - 1);
}

static void gmem_unref(struct gmem *m)
{
	if (--m->refs > 0)
		return;
	munmap((void *)m->base, m->mapped);
	free(m);
}

static void pool_used(int dev, int64_t delta)
{
	struct graph_pool *p = &pools[dev];

	p->used += (uint64_t)delta;
	if (p->used > p->used_high)
		p->used_high = p->used;
}

static void pool_reserved(int dev, int64_t delta)
{
	struct graph_pool *p = &pools[dev];

	p->reserved += (uint64_t)delta;
	if (p->reserved > p->reserved_high)
		p->reserved_high = p->reserved;
}

/* ---- graphs and nodes ------------------------------------------------------ */

static CUresult graph_get(CUgraph h, struct CUgraph_st **out)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!h || h->magic != GRAPH_MAGIC)
		return CUDA_ERROR_INVALID_VALUE;
	*out = h;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
	struct CUgraph_st *g;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!phGraph || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	g = calloc(1, sizeof(*g));
	if (!g)
		return CUDA_ERROR_OUT_OF_MEMORY;
	g->magic = GRAPH_MAGIC;
	*phGraph = g;
	return CUDA_SUCCESS;
}

static void node_release(struct CUgraphNode_st *n)
{
	free(n->launch);
	free((void *)n->alloc.accessDescs);
	if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
		gmem_unref(n->mem);
	n->magic = VSIM_MAGIC_DEAD;
	vsim_graveyard_add(n);
}

/* Executable graphs made from it live on. */
VSIM_EXPORT CUresult cuGraphDestroy(CUgraph hGraph)
{
	struct CUgraph_st *g;
	CUresult rc = graph_get(hGraph, &g);

	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&graph_lock);
	for (size_t i = 0; i < g->n; i++)
		node_release(g->nodes[i]);
	free(g->nodes);
	g->nodes = NULL;
	g->magic = VSIM_MAGIC_DEAD;
	pthread_mutex_unlock(&graph_lock);
	vsim_graveyard_add(g);
	return CUDA_SUCCESS;
}

/* Dependencies must be nodes of g, without duplicates; graph_lock held. */
static CUresult check_deps(struct CUgraph_st *g, const CUgraphNode *deps,
			   size_t ndeps)
{
	if (ndeps && !deps)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < ndeps; i++) {
		if (!deps[i] || deps[i]->magic != NODE_MAGIC ||
		    deps[i]->graph != g)
			return CUDA_ERROR_INVALID_VALUE;
		for (size_t j = 0; j < i; j++)
			if (deps[j] == deps[i])
				return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

/* Checks the common arguments and appends n (taking it) to the graph. On
 * failure n is freed. */
static CUresult node_add(CUgraphNode *out, CUgraph h, const CUgraphNode *deps,
			 size_t ndeps, struct CUgraphNode_st *n)
{
	struct CUgraph_st *g;
	CUresult rc = graph_get(h, &g);

	pthread_mutex_lock(&graph_lock);
	if (rc == CUDA_SUCCESS && !out)
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		rc = check_deps(g, deps, ndeps);
	if (rc == CUDA_SUCCESS && g->n == g->cap) {
		size_t cap = g->cap ? g->cap * 2 : 16;
		struct CUgraphNode_st **t = realloc(g->nodes, cap * sizeof(*t));
		if (t) {
			g->nodes = t;
			g->cap = cap;
		} else {
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	if (rc != CUDA_SUCCESS) {
		pthread_mutex_unlock(&graph_lock);
		free(n->launch);
		free((void *)n->alloc.accessDescs);
		free(n);
		return rc;
	}
	n->magic = NODE_MAGIC;
	n->graph = g;
	n->index = g->n;
	g->nodes[g->n++] = n;
	if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC ||
	    n->type == CU_GRAPH_NODE_TYPE_MEM_FREE)
		g->has_mem_nodes = true;
	pthread_mutex_unlock(&graph_lock);
	*out = n;
	return CUDA_SUCCESS;
}

static struct CUgraphNode_st *node_new(CUgraphNodeType type)
{
	struct CUgraphNode_st *n = calloc(1, sizeof(*n));

	if (n)
		n->type = type;
	return n;
}

VSIM_EXPORT CUresult cuGraphAddEmptyNode(CUgraphNode *phGraphNode,
					 CUgraph hGraph,
					 const CUgraphNode *dependencies,
					 size_t numDependencies)
{
	struct CUgraphNode_st *n = node_new(CU_GRAPH_NODE_TYPE_EMPTY);

	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	return node_add(phGraphNode, hGraph, dependencies, numDependencies, n);
}

/* The kernel's parameters are copied now, as the driver documents. */
VSIM_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode,
					     CUgraph hGraph,
					     const CUgraphNode *dependencies,
					     size_t numDependencies,
					     const CUDA_KERNEL_NODE_PARAMS *p)
{
	struct CUgraphNode_st *n;
	struct CUctx_st *ctx;
	CUfunction f;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!p || (!p->func && !p->kern))
		return CUDA_ERROR_INVALID_VALUE;
	f = p->func ? p->func : (CUfunction)p->kern;
	if (p->func && p->func->magic == VSIM_MAGIC_FUNC)
		ctx = p->func->module->ctx;
	else if (p->ctx)
		ctx = p->ctx;
	else if ((rc = vsim_ctx_get(&ctx)) != CUDA_SUCCESS)
		return rc;
	if (!vsim_ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	n = node_new(CU_GRAPH_NODE_TYPE_KERNEL);
	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = vsim_launch_prepare(f, ctx,
				 (unsigned[3]){ p->gridDimX, p->gridDimY, p->gridDimZ },
				 (unsigned[3]){ p->blockDimX, p->blockDimY, p->blockDimZ },
				 p->sharedMemBytes, p->kernelParams, p->extra,
				 &n->launch);
	if (rc != CUDA_SUCCESS) {
		free(n);
		return rc;
	}
	n->device = ctx->device;
	return node_add(phGraphNode, hGraph, dependencies, numDependencies, n);
}

/* A kernel node of a launch already checked and packed (stream capture);
 * l is taken, freed on failure. */
CUresult vsim_graph_add_launch(CUgraph h, const CUgraphNode *deps, size_t ndeps,
			       struct vsim_launch *l, int device,
			       CUgraphNode *out)
{
	struct CUgraphNode_st *n = node_new(CU_GRAPH_NODE_TYPE_KERNEL);

	if (!n) {
		free(l);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	n->launch = l;
	n->device = device;
	return node_add(out, h, deps, ndeps, n);
}

static CUresult check_alloc_params(const CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
	const CUmemPoolProps *pp;

	if (!p || p->bytesize == 0)
		return CUDA_ERROR_INVALID_VALUE;
	pp = &p->poolProps;
	if (pp->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    pp->handleTypes != CU_MEM_HANDLE_TYPE_NONE)
		return CUDA_ERROR_INVALID_VALUE;
	if (pp->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (pp->location.id < 0 || pp->location.id >= vsim_g.cfg.devices)
		return CUDA_ERROR_INVALID_VALUE;
	if (p->accessDescCount > (size_t)vsim_g.cfg.devices ||
	    (p->accessDescCount && !p->accessDescs))
		return CUDA_ERROR_INVALID_VALUE;
	if (p->bytesize > SIZE_MAX / 2)
		return CUDA_ERROR_OUT_OF_MEMORY;
	return CUDA_SUCCESS;
}

/* Maps the allocation's address range; it costs no capacity until launch. */
static CUresult alloc_node_fill(struct CUgraphNode_st *n,
				const CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
	struct gmem *m = calloc(1, sizeof(*m));
	size_t descs = p->accessDescCount * sizeof(CUmemAccessDesc);
	CUmemAccessDesc *copy = descs ? malloc(descs) : NULL;
	void *va;

	if (!m || (descs && !copy))
		goto out_free;
	m->size = p->bytesize;
	m->mapped = page_round(p->bytesize);
	m->device = p->poolProps.location.id;
	m->refs = 1;
	va = mmap(NULL, m->mapped, PROT_READ | PROT_WRITE,
		  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (va == MAP_FAILED)
		goto out_free;
	m->base = (uintptr_t)va;
	if (descs)
		memcpy(copy, p->accessDescs, descs);
	n->alloc = *p;
	n->alloc.accessDescs = copy;
	n->alloc.dptr = (CUdeviceptr)m->base;
	n->mem = m;
	return CUDA_SUCCESS;
out_free:
	free(m);
	free(copy);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

VSIM_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode,
					    CUgraph hGraph,
					    const CUgraphNode *dependencies,
					    size_t numDependencies,
					    CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
	struct CUgraphNode_st *n;
	struct gmem *m;
	CUresult rc = vsim_check_init();

	if (rc == CUDA_SUCCESS)
		rc = check_alloc_params(nodeParams);
	if (rc != CUDA_SUCCESS)
		return rc;
	n = node_new(CU_GRAPH_NODE_TYPE_MEM_ALLOC);
	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = alloc_node_fill(n, nodeParams);
	if (rc != CUDA_SUCCESS) {
		free(n);
		return rc;
	}
	m = n->mem;
	rc = node_add(phGraphNode, hGraph, dependencies, numDependencies, n);
	if (rc != CUDA_SUCCESS) {
		pthread_mutex_lock(&graph_lock);
		gmem_unref(m);
		pthread_mutex_unlock(&graph_lock);
		return rc;
	}
	nodeParams->dptr = (CUdeviceptr)m->base;
	return CUDA_SUCCESS;
}

/* The allocation node of g whose address is dptr, not yet freed in g;
 * graph_lock held. */
static struct CUgraphNode_st *alloc_node_of(struct CUgraph_st *g,
					    CUdeviceptr dptr)
{
	for (size_t i = 0; i < g->n; i++) {
		struct CUgraphNode_st *a = g->nodes[i];
		if (a->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC &&
		    a->alloc.dptr == dptr && !a->freed)
			return a;
	}
	return NULL;
}

/* Only allocations of the same graph are freed by its free nodes here. */
VSIM_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode *phGraphNode,
					   CUgraph hGraph,
					   const CUgraphNode *dependencies,
					   size_t numDependencies,
					   CUdeviceptr dptr)
{
	struct CUgraphNode_st *n, *a;
	struct CUgraph_st *g;
	CUresult rc = graph_get(hGraph, &g);

	if (rc != CUDA_SUCCESS)
		return rc;
	n = node_new(CU_GRAPH_NODE_TYPE_MEM_FREE);
	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&graph_lock);
	a = alloc_node_of(g, dptr);
	if (a)
		a->freed = true;
	pthread_mutex_unlock(&graph_lock);
	if (!a) {
		free(n);
		return CUDA_ERROR_INVALID_VALUE;
	}
	n->mem = a->mem;
	rc = node_add(phGraphNode, hGraph, dependencies, numDependencies, n);
	if (rc != CUDA_SUCCESS) {
		pthread_mutex_lock(&graph_lock);
		a->freed = false;
		pthread_mutex_unlock(&graph_lock);
	}
	return rc;
}

/* Whether [dptr, dptr+len) lies in an allocation of g not yet freed in g:
 * a memset node may use graph memory between its allocation and free. */
static bool graph_mem_holds(struct CUgraph_st *g, CUdeviceptr dptr, size_t len)
{
	bool in = false;

	pthread_mutex_lock(&graph_lock);
	for (size_t i = 0; i < g->n && !in; i++) {
		struct CUgraphNode_st *a = g->nodes[i];
		in = a->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && !a->freed &&
		     dptr >= a->alloc.dptr &&
		     dptr - a->alloc.dptr <= a->mem->size &&
		     len <= a->mem->size - (dptr - a->alloc.dptr);
	}
	pthread_mutex_unlock(&graph_lock);
	return in;
}

/* The same rules as cuMemsetD2D*Async (copy.c), on device memory or on
 * the graph's own memory. */
static CUresult check_memset(struct CUgraph_st *g,
			     const CUDA_MEMSET_NODE_PARAMS *p)
{
	unsigned e;
	size_t extent;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	e = p->elementSize;
	if ((e != 1 && e != 2 && e != 4) || p->width == 0 || p->height == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (p->dst % e ||
	    (p->height > 1 && (p->pitch < p->width * e || p->pitch % e)))
		return CUDA_ERROR_INVALID_VALUE;
	if (p->width > SIZE_MAX / e / 2 ||
	    (p->height > 1 && p->pitch > SIZE_MAX / p->height))
		return CUDA_ERROR_INVALID_VALUE;
	extent = (p->height - 1) * p->pitch + p->width * e;
	if (vsim_mem_check_device(p->dst, extent) != CUDA_SUCCESS &&
	    !graph_mem_holds(g, p->dst, extent))
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

CUresult vsim_graph_add_memset(CUgraph h, const CUgraphNode *deps,
			       size_t ndeps, const CUDA_MEMSET_NODE_PARAMS *p,
			       CUgraphNode *out)
{
	struct CUgraphNode_st *n;
	struct CUgraph_st *g;
	CUresult rc = graph_get(h, &g);

	if (rc == CUDA_SUCCESS)
		rc = check_memset(g, p);
	if (rc != CUDA_SUCCESS)
		return rc;
	n = node_new(CU_GRAPH_NODE_TYPE_MEMSET);
	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	n->memset = *p;
	return node_add(out, h, deps, ndeps, n);
}

/* The context only says where the memory is; the address says it here. */
VSIM_EXPORT CUresult cuGraphAddMemsetNode(CUgraphNode *phGraphNode,
					  CUgraph hGraph,
					  const CUgraphNode *dependencies,
					  size_t numDependencies,
					  const CUDA_MEMSET_NODE_PARAMS *p,
					  CUcontext ctx)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (ctx && !vsim_ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	return vsim_graph_add_memset(hGraph, dependencies, numDependencies, p,
				     phGraphNode);
}

static CUresult node_get(CUgraphNode h, struct CUgraphNode_st **out)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!h || h->magic != NODE_MAGIC)
		return CUDA_ERROR_INVALID_VALUE;
	*out = h;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuGraphNodeGetType(CUgraphNode hNode,
					CUgraphNodeType *type)
{
	struct CUgraphNode_st *n;
	CUresult rc = node_get(hNode, &n);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!type)
		return CUDA_ERROR_INVALID_VALUE;
	*type = n->type;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuGraphMemAllocNodeGetParams(CUgraphNode hNode,
						  CUDA_MEM_ALLOC_NODE_PARAMS *params_out)
{
	struct CUgraphNode_st *n;
	CUresult rc = node_get(hNode, &n);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!params_out || n->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC)
		return CUDA_ERROR_INVALID_VALUE;
	*params_out = n->alloc;
	return CUDA_SUCCESS;
}

/* With nodes NULL, the count; else up to *numNodes handles, and the count
 * written when the graph has fewer (the rest of the array set to NULL). */
VSIM_EXPORT CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes,
				     size_t *numNodes)
{
	struct CUgraph_st *g;
	CUresult rc = graph_get(hGraph, &g);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!numNodes)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&graph_lock);
	if (nodes) {
		for (size_t i = 0; i < *numNodes; i++)
			nodes[i] = i < g->n ? g->nodes[i] : NULL;
		if (g->n < *numNodes)
			*numNodes = g->n;
	} else {
		*numNodes = g->n;
	}
	pthread_mutex_unlock(&graph_lock);
	return CUDA_SUCCESS;
}

/* ---- executable graphs ----------------------------------------------------- */

/* Copies g's nodes into x in creation order; graph_lock held. */
static CUresult exec_build(struct CUgraphExec_st *x, struct CUgraph_st *g)
{
	x->nodes = calloc(g->n ? g->n : 1, sizeof(*x->nodes));
	x->mems = calloc(g->n ? g->n : 1, sizeof(*x->mems));
	x->live = calloc(g->n ? g->n : 1, sizeof(*x->live));
	if (!x->nodes || !x->mems || !x->live)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < g->n; i++) {
		struct CUgraphNode_st *n = g->nodes[i];
		struct exec_node *e = &x->nodes[x->n++];
		size_t sz;

		e->type = n->type;
		e->device = n->device;
		e->memset = n->memset;
		if (n->launch) {
			sz = sizeof(*n->launch) + n->launch->params_size;
			e->launch = malloc(sz);
			if (!e->launch)
				return CUDA_ERROR_OUT_OF_MEMORY;
			memcpy(e->launch, n->launch, sz);
		}
		if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
			e->slot = x->nmems;
			x->mems[x->nmems++] = n->mem;
			n->mem->refs++;
			x->reserve[n->mem->device] += n->mem->mapped;
			x->leaky |= !n->freed;
		}
	}
	/* Free nodes find their allocation's slot. */
	for (size_t i = 0; i < g->n; i++) {
		if (g->nodes[i]->type != CU_GRAPH_NODE_TYPE_MEM_FREE)
			continue;
		for (size_t k = 0; k < x->nmems; k++)
			if (x->mems[k] == g->nodes[i]->mem)
				x->nodes[i].slot = k;
	}
	return CUDA_SUCCESS;
}

/* Frees what exec_build made; graph_lock held. */
static void exec_free(struct CUgraphExec_st *x)
{
	for (size_t i = 0; i < x->n; i++)
		free(x->nodes[i].launch);
	for (size_t k = 0; k < x->nmems; k++)
		gmem_unref(x->mems[k]);
	free(x->nodes);
	free(x->mems);
	free(x->live);
}

static CUresult instantiate(CUgraphExec *out, CUgraph h,
			    unsigned long long flags)
{
	const unsigned long long known =
		CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
		CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
		CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH |
		CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
	struct CUgraphExec_st *x;
	struct CUgraph_st *g;
	CUresult rc = graph_get(h, &g);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!out || (flags & ~known) ||
	    ((flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) &&
	     (flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)))
		return CUDA_ERROR_INVALID_VALUE;
	x = calloc(1, sizeof(*x));
	if (!x)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&graph_lock);
	/* With memory nodes, one executable graph at a time. */
	if (g->has_mem_nodes && g->execs > 0)
		rc = CUDA_ERROR_INVALID_VALUE;
	else
		rc = exec_build(x, g);
	if (rc != CUDA_SUCCESS) {
		exec_free(x);
		pthread_mutex_unlock(&graph_lock);
		free(x);
		return rc;
	}
	x->magic = EXEC_MAGIC;
	x->graph = g;
	x->flags = flags;
	g->execs++;
	x->next = execs;
	execs = x;
	pthread_mutex_unlock(&graph_lock);
	*out = x;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec,
						 CUgraph hGraph,
						 unsigned long long flags)
{
	/* UPLOAD belongs to cuGraphInstantiateWithParams only. */
	if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)
		return vsim_check_init() != CUDA_SUCCESS ? vsim_check_init()
							 : CUDA_ERROR_INVALID_VALUE;
	return instantiate(phGraphExec, hGraph, flags);
}

CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
				       CUgraphNode *phErrorNode, char *logBuffer,
				       size_t bufferSize);
VSIM_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec,
					   CUgraph hGraph,
					   CUgraphNode *phErrorNode,
					   char *logBuffer, size_t bufferSize)
{
	CUresult rc = instantiate(phGraphExec, hGraph, 0);

	if (phErrorNode)
		*phErrorNode = NULL;
	if (logBuffer && bufferSize)
		logBuffer[0] = '\0';
	return rc;
}

/* An upload is a no-op here: the graph is ready once instantiated. */
static CUresult instantiate_params(CUgraphExec *out, CUgraph h,
				   CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
	CUresult rc;

	if (!p)
		return vsim_check_init() != CUDA_SUCCESS ? vsim_check_init()
							 : CUDA_ERROR_INVALID_VALUE;
	rc = instantiate(out, h, p->flags);
	p->hErrNode_out = NULL;
	p->result_out = rc == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS
					   : CUDA_GRAPH_INSTANTIATE_ERROR;
	return rc;
}

VSIM_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec,
						  CUgraph hGraph,
						  CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
	return instantiate_params(phGraphExec, hGraph, p);
}

CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec,
						   CUgraph hGraph,
						   CUDA_GRAPH_INSTANTIATE_PARAMS *p);
VSIM_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec,
						       CUgraph hGraph,
						       CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
	return instantiate_params(phGraphExec, hGraph, p);
}

static CUresult exec_get(CUgraphExec h, struct CUgraphExec_st **out)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!h || h->magic != EXEC_MAGIC)
		return CUDA_ERROR_INVALID_VALUE;
	*out = h;
	return CUDA_SUCCESS;
}

/* A memory node runs: the allocation becomes used, or stops being used. */
static void run_mem_node(struct CUgraphExec_st *x, const struct exec_node *e)
{
	struct gmem *m = x->mems[e->slot];
	bool alloc = e->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC;

	pthread_mutex_lock(&graph_lock);
	if (x->live[e->slot] != alloc)
		pool_used(m->device, alloc ? (int64_t)m->mapped
					   : -(int64_t)m->mapped);
	x->live[e->slot] = alloc;
	pthread_mutex_unlock(&graph_lock);
}

/* The whole graph, in order, on the launch stream's worker. */
static void CUDA_CB run_exec(void *arg)
{
	struct CUgraphExec_st *x = arg;

	for (size_t i = 0; i < x->n; i++) {
		const struct exec_node *e = &x->nodes[i];

		if (e->type == CU_GRAPH_NODE_TYPE_KERNEL)
			vsim_launch_run(e->device, e->launch);
		else if (e->type == CU_GRAPH_NODE_TYPE_MEMSET)
			vsim_fill_rows((void *)(uintptr_t)e->memset.dst,
				       e->memset.pitch, e->memset.value,
				       e->memset.elementSize, e->memset.width,
				       e->memset.height);
		else if (e->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC ||
			 e->type == CU_GRAPH_NODE_TYPE_MEM_FREE)
			run_mem_node(x, e);
	}
	pthread_mutex_lock(&graph_lock);
	x->in_flight--;
	pthread_mutex_unlock(&graph_lock);
}

/* Reserves x's memory on each device it allocates on, all or nothing;
 * graph_lock held. */
static CUresult reserve_all(struct CUgraphExec_st *x)
{
	CUresult rc = CUDA_SUCCESS;
	int d;

	for (d = 0; d < VSIM_MAX_DEVICES && rc == CUDA_SUCCESS; d++)
		if (x->reserve[d])
			rc = vsim_state_reserve(d, x->reserve[d]);
	if (rc != CUDA_SUCCESS) {
		for (d -= 2; d >= 0; d--)
			if (x->reserve[d])
				vsim_state_release(d, x->reserve[d]);
		return rc;
	}
	for (d = 0; d < VSIM_MAX_DEVICES; d++)
		if (x->reserve[d])
			pool_reserved(d, (int64_t)x->reserve[d]);
	return CUDA_SUCCESS;
}

/* Checks a launch and reserves the graph's memory; graph_lock held. */
static CUresult launch_begin(struct CUgraphExec_st *x)
{
	CUresult rc;

	/* Allocations a previous launch left unfreed (AUTO_FREE: the
	 * allocation nodes take them over again). */
	if (x->leaky && x->launched &&
	    !(x->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH))
		return CUDA_ERROR_INVALID_VALUE;
	if (!x->backed) {
		rc = reserve_all(x);
		if (rc != CUDA_SUCCESS)
			return rc;
		x->backed = true;
	}
	x->launched = true;
	x->in_flight++;
	return CUDA_SUCCESS;
}

/* Ordered behind earlier work on the stream and earlier launches of x.
 * A graph launched into a capture would be a child graph node, which the
 * graph model lacks: refused before anything is reserved. */
static CUresult graph_launch(CUgraphExec h, CUstream hs, bool ptsz)
{
	struct CUgraphExec_st *x;
	struct CUstream_st *s;
	struct vsim_op *op;
	uint64_t seq;
	CUresult rc = exec_get(h, &x);

	if (rc == CUDA_SUCCESS)
		rc = vsim_stream_resolve(hs, ptsz, &s);
	if (rc == CUDA_SUCCESS)
		rc = vsim_capture_refuse(s);
	if (rc != CUDA_SUCCESS)
		return rc;
	op = vsim_op_new(VSIM_OP_HOST_FN);
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	op->u.host.fn = run_exec;
	op->u.host.data = x;
	pthread_mutex_lock(&graph_lock);
	rc = launch_begin(x);
	if (rc == CUDA_SUCCESS && x->last_stream && x->last_stream != s) {
		op->deps = malloc(sizeof(*op->deps));
		if (op->deps)
			op->deps[op->ndeps++] =
				(struct vsim_dep){ x->last_stream, x->last_seq };
	}
	if (rc != CUDA_SUCCESS) {
		pthread_mutex_unlock(&graph_lock);
		free(op);
		return rc;
	}
	/* Submitting under graph_lock keeps launches of x in order; the
	 * worker takes graph_lock only after the op is queued. Not through
	 * capture (checked above): capture.c takes graph_lock after its own. */
	rc = vsim_stream_enqueue(s, op, &seq);
	if (rc == CUDA_SUCCESS) {
		x->last_stream = s;
		x->last_seq = seq;
	} else {
		x->in_flight--;
	}
	pthread_mutex_unlock(&graph_lock);
	return rc;
}

VSIM_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	return graph_launch(hGraphExec, hStream, false);
}

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
VSIM_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec,
					CUstream hStream)
{
	return graph_launch(hGraphExec, hStream, true);
}

/* Returns x's physical memory to the device; graph_lock held. */
static void exec_unback(struct CUgraphExec_st *x)
{
	for (size_t k = 0; k < x->nmems; k++) {
		if (x->live[k])
			pool_used(x->mems[k]->device,
				  -(int64_t)x->mems[k]->mapped);
		x->live[k] = false;
	}
	if (!x->backed)
		return;
	for (int d = 0; d < VSIM_MAX_DEVICES; d++) {
		if (!x->reserve[d])
			continue;
		vsim_state_release(d, x->reserve[d]);
		pool_reserved(d, -(int64_t)x->reserve[d]);
	}
	x->backed = false;
}

/* Waits for its launches; its allocations and reservation go back. */
VSIM_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
	struct CUgraphExec_st *x, **pp;
	struct CUstream_st *s;
	uint64_t seq;
	CUresult rc = exec_get(hGraphExec, &x);

	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&graph_lock);
	s = x->last_stream;
	seq = x->last_seq;
	pthread_mutex_unlock(&graph_lock);
	if (s)
		vsim_stream_wait_seq(s, seq);
	pthread_mutex_lock(&graph_lock);
	for (pp = &execs; *pp && *pp != x; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = x->next;
	exec_unback(x);
	x->graph->execs--;
	exec_free(x);
	x->magic = VSIM_MAGIC_DEAD;
	pthread_mutex_unlock(&graph_lock);
	vsim_graveyard_add(x);
	return CUDA_SUCCESS;
}

/* ---- the device's graph memory pool ---------------------------------------- */

VSIM_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device)
{
	CUresult rc = vsim_check_device(device);

	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&graph_lock);
	for (struct CUgraphExec_st *x = execs; x; x = x->next) {
		bool busy = x->in_flight > 0;
		for (size_t k = 0; k < x->nmems; k++)
			busy |= x->live[k];
		if (x->reserve[device] && x->backed && !busy)
			exec_unback(x);
	}
	pthread_mutex_unlock(&graph_lock);
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice device,
						  CUgraphMem_attribute attr,
						  void *value)
{
	struct graph_pool *p;
	uint64_t v;
	CUresult rc = vsim_check_device(device);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	p = &pools[device];
	pthread_mutex_lock(&graph_lock);
	switch (attr) {
	case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: v = p->used; break;
	case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: v = p->used_high; break;
	case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: v = p->reserved; break;
	case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: v = p->reserved_high; break;
	default: rc = CUDA_ERROR_INVALID_VALUE;
	}
	pthread_mutex_unlock(&graph_lock);
	if (rc == CUDA_SUCCESS)
		*(cuuint64_t *)value = v;
	return rc;
}

/* Only the high watermarks, and only to zero: they restart from the
 * current amount. */
VSIM_EXPORT CUresult cuDeviceSetGraphMemAttribute(CUdevice device,
						  CUgraphMem_attribute attr,
						  void *value)
{
	struct graph_pool *p;
	CUresult rc = vsim_check_device(device);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!value || *(cuuint64_t *)value != 0)
		return CUDA_ERROR_INVALID_VALUE;
	p = &pools[device];
	pthread_mutex_lock(&graph_lock);
	if (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)
		p->used_high = p->used;
	else if (attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
		p->reserved_high = p->reserved;
	else
		rc = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_unlock(&graph_lock);
	return rc;
}

/* In a forked child: the parent's executable graphs and pool are not the
 * child's (their memory stays reserved by the parent's slot). */
void vsim_graph_fork_child(void)
{
	pthread_mutex_init(&graph_lock, NULL);
	execs = NULL;
	memset(pools, 0, sizeof(pools));
}
