/* capture.c - stream capture: work queued on a capturing stream becomes
 * nodes of a graph instead of running.
 *
 * A capture starts on one stream, its origin, and spreads to others through
 * events: a stream that waits for an event recorded in the capture joins
 * it. Each stream of a capture has its own dependency set, the nodes its
 * next node will depend on: a captured node replaces the set (one stream's
 * nodes form a chain), waiting for an event adds the event's set. Creation
 * order stays topological, which is all graph.c needs to run the graph.
 * cuStreamEndCapture on the origin hands the graph over once every stream
 * that joined has been joined back (its set lies among the origin's nodes
 * or their ancestors).
 *
 * What graph.c's model holds is captured: kernels, stream-ordered
 * allocations and frees of them, memsets. Anything else queued on a
 * capturing stream (copies, host functions, graph launches, waits for work
 * outside the capture, synchronising it) is refused with
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture, as the
 * driver does for an illegal operation: from then on its streams refuse
 * work with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, and cuStreamEndCapture
 * returns that with no graph. Nothing captured runs.
 *
 * Capture modes: a thread's mode (cuThreadExchangeStreamCaptureMode) and
 * the modes captures began with decide when the thread may not make a
 * potentially unsafe call (vsim_capture_unsafe_call); a refused call
 * invalidates the captures it conflicts with.
 *
 * capture_lock guards every capture, streams' capture pointers and events'
 * capture fields. Nodes are added holding it, so it comes before graph.c's
 * lock; event.c may hold an event's lock when it calls in, so this file
 * takes no event's lock while holding capture_lock.
 */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

/* One stream of a capture and the nodes its next node will depend on. */
struct member {
	struct CUstream_st *stream;
	CUgraphNode *deps;
	CUgraphEdgeData *edges;      /* all zero, parallel to deps (the _v3 query) */
	size_t ndeps, cap;
};

/* A captured node and its dependencies, for the join check. */
struct cap_node {
	CUgraphNode node;
	CUgraphNode *deps;
	size_t ndeps;
};

struct vsim_capture {
	uint64_t id;
	CUgraph graph;
	CUstreamCaptureMode mode;
	pthread_t owner;             /* the thread that began it */
	bool invalidated;
	struct member *members;      /* [0]: the origin */
	size_t nmembers, members_cap;
	struct cap_node *nodes;
	size_t nnodes, nodes_cap;
	struct CUevent_st **events;  /* recorded in it */
	size_t nevents, events_cap;
	struct vsim_capture *next;   /* in captures */
};

static pthread_mutex_t capture_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vsim_capture *captures;
/* Captures in progress: when 0, every entry point returns at once. */
static atomic_int live;
static atomic_ullong next_capture_id = 1;
static _Thread_local CUstreamCaptureMode thread_mode;  /* 0: GLOBAL */

/* arr (n elements of size bytes, room for *cap) with room for one more:
 * arr itself, or a larger copy (*cap updated), or NULL (arr unchanged). */
static void *grow(void *arr, size_t *cap, size_t n, size_t size)
{
	size_t ncap = *cap ? *cap * 2 : 4;
	void *t;

	if (n < *cap)
		return arr;
	t = realloc(arr, ncap * size);
	if (t)
		*cap = ncap;
	return t;
}

static struct vsim_capture *capture_of(struct CUstream_st *s)
{
	return __atomic_load_n(&s->capture, __ATOMIC_ACQUIRE);
}

static void set_capture(struct CUstream_st *s, struct vsim_capture *c)
{
	__atomic_store_n(&s->capture, c, __ATOMIC_RELEASE);
}

/* capture_lock held, for this and every function below taking a capture. */
static struct member *member_of(struct vsim_capture *c, struct CUstream_st *s)
{
	for (size_t i = 0; i < c->nmembers; i++)
		if (c->members[i].stream == s)
			return &c->members[i];
	return NULL;
}

static bool deps_has(const struct member *m, CUgraphNode n)
{
	for (size_t i = 0; i < m->ndeps; i++)
		if (m->deps[i] == n)
			return true;
	return false;
}

/* The edge array is only ever zeros, so it is made anew, not copied. */
static CUresult deps_add(struct member *m, CUgraphNode n)
{
	size_t cap = m->cap;
	CUgraphEdgeData *edges;
	CUgraphNode *deps;

	if (deps_has(m, n))
		return CUDA_SUCCESS;
	if (m->ndeps == m->cap) {
		deps = grow(m->deps, &cap, m->ndeps, sizeof(*deps));
		if (!deps)
			return CUDA_ERROR_OUT_OF_MEMORY;
		m->deps = deps;
		edges = calloc(cap, sizeof(*edges));
		if (!edges)
			return CUDA_ERROR_OUT_OF_MEMORY;
		free(m->edges);
		m->edges = edges;
		m->cap = cap;
	}
	m->deps[m->ndeps++] = n;
	return CUDA_SUCCESS;
}

static struct member *member_add(struct vsim_capture *c, struct CUstream_st *s)
{
	struct member *m = grow(c->members, &c->members_cap, c->nmembers,
				sizeof(*m));

	if (!m)
		return NULL;
	c->members = m;
	m = &c->members[c->nmembers++];
	memset(m, 0, sizeof(*m));
	m->stream = s;
	set_capture(s, c);
	return m;
}

/* Node n was just added after m's dependencies: the join check learns its
 * edges, and it becomes the stream's only dependency. A failure here
 * leaves the graph and the capture apart: the capture is invalidated. */
static CUresult node_added(struct vsim_capture *c, struct member *m,
			   CUgraphNode n)
{
	struct cap_node *cn = grow(c->nodes, &c->nodes_cap, c->nnodes,
				   sizeof(*cn));
	CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;

	if (!cn)
		goto out_invalid;
	c->nodes = cn;
	cn = &c->nodes[c->nnodes];
	cn->node = n;
	cn->ndeps = m->ndeps;
	cn->deps = m->ndeps ? malloc(m->ndeps * sizeof(*cn->deps)) : NULL;
	if (m->ndeps && !cn->deps)
		goto out_invalid;
	if (m->ndeps)
		memcpy(cn->deps, m->deps, m->ndeps * sizeof(*cn->deps));
	c->nnodes++;
	m->ndeps = 0;
	rc = deps_add(m, n);
	if (rc == CUDA_SUCCESS)
		return rc;
out_invalid:
	c->invalidated = true;
	return rc;
}

/* Whether this thread, in its mode, may not make a potentially unsafe call
 * while c goes on (the rules of cuThreadExchangeStreamCaptureMode). */
static bool conflicts(const struct vsim_capture *c)
{
	bool mine = pthread_equal(c->owner, pthread_self());

	switch (thread_mode) {
	case CU_STREAM_CAPTURE_MODE_GLOBAL:
		return mine ? c->mode != CU_STREAM_CAPTURE_MODE_RELAXED
			    : c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
	case CU_STREAM_CAPTURE_MODE_THREAD_LOCAL:
		return mine && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED;
	default:
		return false;
	}
}

/* Whether a blocking stream of ctx captures: the legacy stream would
 * depend on its capture, which the driver refuses. */
static bool blocking_capture(struct CUctx_st *ctx, bool invalidate)
{
	bool any = false;

	for (struct vsim_capture *c = captures; c; c = c->next) {
		for (size_t i = 0; i < c->nmembers; i++) {
			struct CUstream_st *t = c->members[i].stream;
			if (t->ctx != ctx || (t->flags & CU_STREAM_NON_BLOCKING))
				continue;
			any = true;
			c->invalidated |= invalidate;
		}
	}
	return any;
}

static struct vsim_capture *capture_by_id(uint64_t id)
{
	struct vsim_capture *c = captures;

	while (c && c->id != id)
		c = c->next;
	return c;
}

/* ---- work queued on a capturing stream ----------------------------------- */

bool vsim_capture_take(struct CUstream_st *s, struct vsim_op *op, CUresult *rc)
{
	struct vsim_capture *c;
	struct member *m;
	CUgraphNode n;

	if (!atomic_load(&live) || (!s->legacy && !capture_of(s)))
		return false;
	pthread_mutex_lock(&capture_lock);
	if (s->legacy) {
		if (!blocking_capture(s->ctx, true))
			goto out_not;
		*rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
		goto out_taken;
	}
	c = s->capture;
	if (!c)
		goto out_not;
	m = member_of(c, s);
	if (c->invalidated) {
		*rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	} else if (op->kind == VSIM_OP_KERNEL) {
		*rc = vsim_graph_add_launch(c->graph, m->deps, m->ndeps,
					    op->u.kernel.launch,
					    s->ctx->device, &n);
		op->u.kernel.launch = NULL;
		if (*rc == CUDA_SUCCESS)
			*rc = node_added(c, m, n);
	} else {
		/* No node type for it (or, for an event record or wait, the
		 * stream joined the capture while the op was on its way). */
		*rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
		c->invalidated = true;
	}
out_taken:
	pthread_mutex_unlock(&capture_lock);
	return true;
out_not:
	pthread_mutex_unlock(&capture_lock);
	return false;
}

CUresult vsim_capture_refuse(struct CUstream_st *s)
{
	CUresult rc = CUDA_SUCCESS;
	struct vsim_capture *c;

	if (!atomic_load(&live))
		return CUDA_SUCCESS;
	pthread_mutex_lock(&capture_lock);
	c = s->capture;
	if (s->legacy && blocking_capture(s->ctx, true))
		rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
	else if (c && c->invalidated)
		rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	else if (c)
		rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	if (c)
		c->invalidated = true;
	pthread_mutex_unlock(&capture_lock);
	return rc;
}

CUresult vsim_capture_unsafe_call(void)
{
	bool refused = false;

	if (!atomic_load(&live))
		return CUDA_SUCCESS;
	pthread_mutex_lock(&capture_lock);
	for (struct vsim_capture *c = captures; c; c = c->next) {
		if (!conflicts(c))
			continue;
		c->invalidated = true;
		refused = true;
	}
	pthread_mutex_unlock(&capture_lock);
	return refused ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

/* When s captures: its capture, with capture_lock held, its member in *m,
 * and *rc CUDA_SUCCESS, or CUDA_ERROR_STREAM_CAPTURE_INVALIDATED once the
 * capture was invalidated. NULL, unlocked, when s does not capture. */
static struct vsim_capture *capture_lock_of(struct CUstream_st *s,
					    struct member **m, CUresult *rc)
{
	struct vsim_capture *c;

	*rc = CUDA_SUCCESS;
	if (!atomic_load(&live) || s->legacy || !capture_of(s))
		return NULL;
	pthread_mutex_lock(&capture_lock);
	c = s->capture;
	if (!c) {
		pthread_mutex_unlock(&capture_lock);
		return NULL;
	}
	*m = member_of(c, s);
	if (c->invalidated)
		*rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	return c;
}

/* The node is the allocation, with its address fixed for the graph's life:
 * what cuGraphAddMemAllocNode makes. A host pool's memory has no node. */
bool vsim_capture_alloc(struct CUstream_st *s, int device, size_t bytes,
			CUdeviceptr *dptr, CUresult *rc)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p;
	struct vsim_capture *c;
	struct member *m;
	CUgraphNode n;

	c = capture_lock_of(s, &m, rc);
	if (!c)
		return false;
	if (*rc != CUDA_SUCCESS)
		goto out;
	if (device < 0) {
		*rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
		c->invalidated = true;
		goto out;
	}
	memset(&p, 0, sizeof(p));
	p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.poolProps.location.id = device;
	p.bytesize = bytes;
	*rc = cuGraphAddMemAllocNode(&n, c->graph, m->deps, m->ndeps, &p);
	if (*rc == CUDA_SUCCESS)
		*rc = node_added(c, m, n);
	if (*rc == CUDA_SUCCESS)
		*dptr = p.dptr;
out:
	pthread_mutex_unlock(&capture_lock);
	return true;
}

/* Only an allocation made in the same capture: graph.c's free nodes free
 * nothing else. */
bool vsim_capture_free(struct CUstream_st *s, CUdeviceptr dptr, CUresult *rc)
{
	struct vsim_capture *c;
	struct member *m;
	CUgraphNode n;

	c = capture_lock_of(s, &m, rc);
	if (!c)
		return false;
	if (*rc == CUDA_SUCCESS) {
		*rc = cuGraphAddMemFreeNode(&n, c->graph, m->deps, m->ndeps,
					    dptr);
		if (*rc == CUDA_SUCCESS) {
			*rc = node_added(c, m, n);
		} else {
			*rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
			c->invalidated = true;
		}
	}
	pthread_mutex_unlock(&capture_lock);
	return true;
}

bool vsim_capture_memset(struct CUstream_st *s,
			 const CUDA_MEMSET_NODE_PARAMS *p, CUresult *rc)
{
	struct vsim_capture *c;
	struct member *m;
	CUgraphNode n;

	c = capture_lock_of(s, &m, rc);
	if (!c)
		return false;
	if (*rc == CUDA_SUCCESS)
		*rc = vsim_graph_add_memset(c->graph, m->deps, m->ndeps, p, &n);
	if (*rc == CUDA_SUCCESS)
		*rc = node_added(c, m, n);
	pthread_mutex_unlock(&capture_lock);
	return true;
}

/* ---- events: how captures cross streams ---------------------------------- */

static void event_drop_deps(struct CUevent_st *e)
{
	free(e->capture_deps);
	e->capture_deps = NULL;
	e->capture_ndeps = 0;
}

/* The event keeps the stream's dependency set, for streams that wait. */
static CUresult event_capture(struct vsim_capture *c, struct member *m,
			      struct CUevent_st *e)
{
	struct CUevent_st **events;
	CUgraphNode *deps = NULL;
	size_t i;

	for (i = 0; i < c->nevents && c->events[i] != e; i++)
		;
	if (i == c->nevents) {
		events = grow(c->events, &c->events_cap, c->nevents,
			      sizeof(*events));
		if (!events)
			return CUDA_ERROR_OUT_OF_MEMORY;
		c->events = events;
		c->events[c->nevents++] = e;
	}
	if (m->ndeps) {
		deps = malloc(m->ndeps * sizeof(*deps));
		if (!deps)
			return CUDA_ERROR_OUT_OF_MEMORY;
		memcpy(deps, m->deps, m->ndeps * sizeof(*deps));
	}
	event_drop_deps(e);
	e->capture_deps = deps;
	e->capture_ndeps = m->ndeps;
	__atomic_store_n(&e->capture_id, c->id, __ATOMIC_RELEASE);
	return CUDA_SUCCESS;
}

bool vsim_capture_record(struct CUstream_st *s, struct CUevent_st *e,
			 CUresult *rc)
{
	struct vsim_capture *c;
	struct member *m;

	c = capture_lock_of(s, &m, rc);
	if (!c)
		return false;
	if (*rc == CUDA_SUCCESS)
		*rc = event_capture(c, m, e);
	pthread_mutex_unlock(&capture_lock);
	return true;
}

void vsim_capture_event_forget(struct CUevent_st *e)
{
	if (!__atomic_load_n(&e->capture_id, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&capture_lock);
	event_drop_deps(e);
	__atomic_store_n(&e->capture_id, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&capture_lock);
}

CUresult vsim_capture_event_check(struct CUevent_st *e)
{
	return __atomic_load_n(&e->capture_id, __ATOMIC_ACQUIRE)
	       ? CUDA_ERROR_CAPTURED_EVENT : CUDA_SUCCESS;
}

/* s waits for e recorded in live capture ec: s joins it, or adds e's
 * dependencies to its own. Two captures never merge. */
static CUresult wait_captured(struct CUstream_st *s, struct vsim_capture *c,
			      struct vsim_capture *ec, struct CUevent_st *e)
{
	struct member *m;
	CUresult rc = CUDA_SUCCESS;

	if (c && c != ec) {
		c->invalidated = ec->invalidated = true;
		return CUDA_ERROR_STREAM_CAPTURE_MERGE;
	}
	if (ec->invalidated)
		return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	if (s->legacy) {
		ec->invalidated = true;
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	}
	m = c ? member_of(c, s) : member_add(ec, s);
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < e->capture_ndeps && rc == CUDA_SUCCESS; i++)
		rc = deps_add(m, e->capture_deps[i]);
	if (rc != CUDA_SUCCESS)
		ec->invalidated = true;
	return rc;
}

/* A capture may only wait for its own work: an event recorded outside it
 * would be a dependency across its boundary. An event never recorded is
 * no dependency at all, as outside capture. */
bool vsim_capture_wait(struct CUstream_st *s, struct CUevent_st *e,
		       CUresult *rc)
{
	struct vsim_capture *c, *ec;
	bool recorded;

	if (!__atomic_load_n(&e->capture_id, __ATOMIC_ACQUIRE) &&
	    (!atomic_load(&live) || s->legacy || !capture_of(s)))
		return false;
	pthread_mutex_lock(&e->lock);
	recorded = e->recorded;
	pthread_mutex_unlock(&e->lock);
	pthread_mutex_lock(&capture_lock);
	c = s->capture;
	ec = e->capture_id ? capture_by_id(e->capture_id) : NULL;
	*rc = CUDA_SUCCESS;
	if (ec) {
		*rc = wait_captured(s, c, ec, e);
	} else if (e->capture_id && !c) {
		*rc = CUDA_ERROR_CAPTURED_EVENT;  /* its capture has ended */
	} else if (!c) {
		pthread_mutex_unlock(&capture_lock);
		return false;
	} else if (c->invalidated) {
		*rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	} else if (recorded || e->capture_id) {
		*rc = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
		c->invalidated = true;
	}
	pthread_mutex_unlock(&capture_lock);
	return true;
}

/* ---- beginning and ending ------------------------------------------------ */

static void capture_free(struct vsim_capture *c)
{
	for (size_t i = 0; i < c->nmembers; i++) {
		free(c->members[i].deps);
		free(c->members[i].edges);
	}
	for (size_t i = 0; i < c->nnodes; i++)
		free(c->nodes[i].deps);
	free(c->members);
	free(c->nodes);
	free(c->events);
	free(c);
}

static CUresult begin_capture(CUstream h, CUstreamCaptureMode mode, bool ptsz)
{
	struct vsim_capture *c;
	struct CUstream_st *s;
	CUresult rc = vsim_stream_resolve(h, ptsz, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	if (s->legacy)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	c = calloc(1, sizeof(*c));
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = cuGraphCreate(&c->graph, 0);
	if (rc != CUDA_SUCCESS) {
		free(c);
		return rc;
	}
	c->mode = mode;
	c->owner = pthread_self();
	pthread_mutex_lock(&capture_lock);
	if (s->capture)
		rc = CUDA_ERROR_ILLEGAL_STATE;
	else if (!member_add(c, s))
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (rc == CUDA_SUCCESS) {
		c->id = atomic_fetch_add(&next_capture_id, 1);
		c->next = captures;
		captures = c;
		atomic_fetch_add(&live, 1);
	}
	pthread_mutex_unlock(&capture_lock);
	if (rc != CUDA_SUCCESS) {
		cuGraphDestroy(c->graph);
		capture_free(c);
	}
	return rc;
}

/* Index of node n among the first `before` captured nodes, searched from
 * the end (a dependency is most often the node just before). */
static size_t index_before(const struct vsim_capture *c, size_t before,
			   CUgraphNode n)
{
	while (before-- > 0)
		if (c->nodes[before].node == n)
			return before;
	return SIZE_MAX;
}

static void mark(bool *seen, const struct vsim_capture *c, size_t before,
		 const CUgraphNode *deps, size_t ndeps)
{
	for (size_t i = 0; i < ndeps; i++) {
		size_t k = index_before(c, before, deps[i]);
		if (k != SIZE_MAX)
			seen[k] = true;
	}
}

/* Whether every stream that joined was joined back: its dependencies are
 * among the origin's or their ancestors. */
static CUresult check_joined(const struct vsim_capture *c)
{
	bool *seen = calloc(c->nnodes + 1, sizeof(*seen));
	CUresult rc = CUDA_SUCCESS;

	if (!seen)
		return CUDA_ERROR_OUT_OF_MEMORY;
	mark(seen, c, c->nnodes, c->members[0].deps, c->members[0].ndeps);
	for (size_t i = c->nnodes; i-- > 0;)
		if (seen[i])
			mark(seen, c, i, c->nodes[i].deps, c->nodes[i].ndeps);
	for (size_t i = 1; i < c->nmembers && rc == CUDA_SUCCESS; i++) {
		const struct member *m = &c->members[i];
		for (size_t k = 0; k < m->ndeps; k++) {
			size_t at = index_before(c, c->nnodes, m->deps[k]);
			if (at == SIZE_MAX || !seen[at])
				rc = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
		}
	}
	free(seen);
	return rc;
}

/* Takes c out of the list and its streams out of capture; events
 * recorded in it stay captured events, without dependencies. */
static void capture_unlink(struct vsim_capture *c)
{
	struct vsim_capture **pp = &captures;

	while (*pp != c)
		pp = &(*pp)->next;
	*pp = c->next;
	atomic_fetch_sub(&live, 1);
	for (size_t i = 0; i < c->nmembers; i++)
		set_capture(c->members[i].stream, NULL);
	for (size_t i = 0; i < c->nevents; i++)
		if (c->events[i]->capture_id == c->id)
			event_drop_deps(c->events[i]);
}

/* Ends the capture, whatever the outcome, except from the wrong thread.
 * On a stream that joined it, it is not the capture's end but an error
 * that invalidates it. */
static CUresult end_capture(CUstream h, CUgraph *out, bool ptsz)
{
	struct vsim_capture *c;
	struct CUstream_st *s;
	CUresult rc = vsim_stream_resolve(h, ptsz, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&capture_lock);
	c = s->capture;
	if (!c) {
		rc = CUDA_ERROR_ILLEGAL_STATE;
	} else if (c->members[0].stream != s) {
		c->invalidated = true;
		rc = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
		c = NULL;
	} else if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
		   !pthread_equal(c->owner, pthread_self())) {
		rc = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
		c = NULL;
	} else {
		rc = c->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
				    : check_joined(c);
		capture_unlink(c);
	}
	pthread_mutex_unlock(&capture_lock);
	if (!c)
		return rc;
	if (rc == CUDA_SUCCESS) {
		*out = c->graph;
	} else {
		*out = NULL;
		cuGraphDestroy(c->graph);
	}
	capture_free(c);
	return rc;
}

/* Streams destroyed (s, or with s NULL every stream of ctx): a capture
 * begun on one ends with no graph, as nobody can end it now; one they
 * joined is invalidated. */
void vsim_capture_streams_gone(struct CUctx_st *ctx, struct CUstream_st *s)
{
	struct vsim_capture *c, *next, *gone = NULL;

	if (!atomic_load(&live))
		return;
	pthread_mutex_lock(&capture_lock);
	for (c = captures; c; c = next) {
		next = c->next;
		for (size_t i = 0; i < c->nmembers; i++) {
			struct CUstream_st *t = c->members[i].stream;
			if (s ? t != s : t->ctx != ctx)
				continue;
			c->invalidated = true;
			if (i > 0)
				continue;
			capture_unlink(c);
			c->next = gone;
			gone = c;
			break;
		}
	}
	pthread_mutex_unlock(&capture_lock);
	for (c = gone; c; c = next) {
		next = c->next;
		cuGraphDestroy(c->graph);
		capture_free(c);
	}
}

/* The first form (CUDA 10.0) has no mode: the default, global. */
#undef cuStreamBeginCapture
CUresult CUDAAPI cuStreamBeginCapture(CUstream h);
VSIM_EXPORT CUresult cuStreamBeginCapture(CUstream h)
{
	return begin_capture(h, CU_STREAM_CAPTURE_MODE_GLOBAL, false);
}

CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream h);
VSIM_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream h)
{
	return begin_capture(h, CU_STREAM_CAPTURE_MODE_GLOBAL, true);
}

VSIM_EXPORT CUresult cuStreamBeginCapture_v2(CUstream h,
					     CUstreamCaptureMode mode)
{
	return begin_capture(h, mode, false);
}

CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream h,
					      CUstreamCaptureMode mode);
VSIM_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream h,
						  CUstreamCaptureMode mode)
{
	return begin_capture(h, mode, true);
}

VSIM_EXPORT CUresult cuStreamEndCapture(CUstream h, CUgraph *phGraph)
{
	return end_capture(h, phGraph, false);
}

CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream h, CUgraph *phGraph);
VSIM_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream h, CUgraph *phGraph)
{
	return end_capture(h, phGraph, true);
}

VSIM_EXPORT CUresult cuThreadExchangeStreamCaptureMode(
	CUstreamCaptureMode *mode)
{
	CUstreamCaptureMode old = thread_mode;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	thread_mode = *mode;
	*mode = old;
	return CUDA_SUCCESS;
}

/* ---- queries ------------------------------------------------------------- */

/* The driver fills the rest only when the status is ACTIVE ("valid data
 * ... only if" it is); a count is zeroed otherwise, as callers read it.
 * The arrays stay valid until the stream's next call, as documented. */
static CUresult capture_info(CUstream h, bool ptds,
			     CUstreamCaptureStatus *status, cuuint64_t *id,
			     CUgraph *graph, const CUgraphNode **deps,
			     const CUgraphEdgeData **edges, size_t *ndeps)
{
	struct vsim_capture *c;
	struct CUstream_st *s;
	struct member *m;
	CUresult rc = vsim_stream_resolve(h, ptds, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!status || (edges && !deps))
		return CUDA_ERROR_INVALID_VALUE;
	*status = CU_STREAM_CAPTURE_STATUS_NONE;
	if (ndeps)
		*ndeps = 0;
	if (!atomic_load(&live))
		return CUDA_SUCCESS;
	pthread_mutex_lock(&capture_lock);
	c = s->capture;
	if (s->legacy && blocking_capture(s->ctx, false)) {
		rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
	} else if (c && c->invalidated) {
		*status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
	} else if (c) {
		m = member_of(c, s);
		*status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
		if (id)
			*id = c->id;
		if (graph)
			*graph = c->graph;
		if (deps)
			*deps = m->deps;
		if (edges)
			*edges = m->edges;
		if (ndeps)
			*ndeps = m->ndeps;
	}
	pthread_mutex_unlock(&capture_lock);
	return rc;
}

#undef cuStreamIsCapturing
#undef cuStreamGetCaptureInfo
CUresult CUDAAPI cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *st);
VSIM_EXPORT CUresult cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *st)
{
	return capture_info(h, false, st, NULL, NULL, NULL, NULL, NULL);
}

CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream h,
					  CUstreamCaptureStatus *st);
VSIM_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream h,
					      CUstreamCaptureStatus *st)
{
	return capture_info(h, true, st, NULL, NULL, NULL, NULL, NULL);
}

CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream h, CUstreamCaptureStatus *st,
					cuuint64_t *id);
VSIM_EXPORT CUresult cuStreamGetCaptureInfo(CUstream h,
					    CUstreamCaptureStatus *st,
					    cuuint64_t *id)
{
	return capture_info(h, false, st, id, NULL, NULL, NULL, NULL);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_ptsz(CUstream h,
					     CUstreamCaptureStatus *st,
					     cuuint64_t *id);
VSIM_EXPORT CUresult cuStreamGetCaptureInfo_ptsz(CUstream h,
						 CUstreamCaptureStatus *st,
						 cuuint64_t *id)
{
	return capture_info(h, true, st, id, NULL, NULL, NULL, NULL);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream h,
	CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *graph,
	const CUgraphNode **deps, size_t *ndeps);
VSIM_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream h,
	CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *graph,
	const CUgraphNode **deps, size_t *ndeps)
{
	return capture_info(h, false, st, id, graph, deps, NULL, ndeps);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v2_ptsz(CUstream h,
	CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *graph,
	const CUgraphNode **deps, size_t *ndeps);
VSIM_EXPORT CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream h,
	CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *graph,
	const CUgraphNode **deps, size_t *ndeps)
{
	return capture_info(h, true, st, id, graph, deps, NULL, ndeps);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream h,
	CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *graph,
	const CUgraphNode **deps, const CUgraphEdgeData **edges,
	size_t *ndeps);
VSIM_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream h,
	CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *graph,
	const CUgraphNode **deps, const CUgraphEdgeData **edges,
	size_t *ndeps)
{
	return capture_info(h, false, st, id, graph, deps, edges, ndeps);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v3_ptsz(CUstream h,
	CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *graph,
	const CUgraphNode **deps, const CUgraphEdgeData **edges,
	size_t *ndeps);
VSIM_EXPORT CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream h,
	CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *graph,
	const CUgraphNode **deps, const CUgraphEdgeData **edges,
	size_t *ndeps)
{
	return capture_info(h, true, st, id, graph, deps, edges, ndeps);
}

/* In a forked child: no capture goes on (the child has no contexts yet). */
void vsim_capture_fork_child(void)
{
	pthread_mutex_init(&capture_lock, NULL);
	captures = NULL;
	atomic_store(&live, 0);
	thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
}
