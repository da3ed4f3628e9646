/* graphs.c - graph memory: charged per executable graph that can allocate.
 *
 * A graph's allocation nodes hold no memory; an executable graph made from
 * it does, from its first launch or upload until it is destroyed, whatever
 * becomes of the graph it was made from (the driver keeps the memory of an
 * exec after cuGraphDestroy). So the charge is the exec's: every
 * instantiation reserves the sum of its graph's allocation nodes, per
 * device, before the driver makes it, and cuGraphExecDestroy gives it back.
 * Nodes made by stream capture (cuMemAllocAsync while capturing) are found
 * the same way, by walking the graph's nodes.
 *
 * Each device's charge is kept in the handle table under the exec's
 * handle plus the device's ordinal (exec handles are aligned, so the keys
 * of two execs never meet); devices 16 and up are not charged.
 */
#include "devices.h"
#include "track.h"

#include <stdlib.h>

#define GRAPH_DEVS	16
#define STACK_NODES	64

/* Adds what the allocation nodes of g take on each device to bytes[];
 * false when the graph cannot be read (nothing charged then). */
static bool graph_mem(CUgraph g, uint64_t bytes[GRAPH_DEVS])
{
	CUgraphNode stack[STACK_NODES], *nodes = stack;
	CUDA_MEM_ALLOC_NODE_PARAMS p;
	CUgraphNodeType type;
	size_t n = 0;
	bool ok = false;

	if (!vgpu__real.cuGraphGetNodes || !vgpu__real.cuGraphNodeGetType ||
	    !vgpu__real.cuGraphMemAllocNodeGetParams ||
	    vgpu__real.cuGraphGetNodes(g, NULL, &n) != CUDA_SUCCESS)
		return false;
	if (n > STACK_NODES && !(nodes = malloc(n * sizeof(*nodes))))
		return false;
	if (vgpu__real.cuGraphGetNodes(g, nodes, &n) != CUDA_SUCCESS)
		goto out;
	for (size_t i = 0; i < n; i++) {
		if (vgpu__real.cuGraphNodeGetType(nodes[i], &type) !=
			    CUDA_SUCCESS ||
		    type != CU_GRAPH_NODE_TYPE_MEM_ALLOC ||
		    vgpu__real.cuGraphMemAllocNodeGetParams(nodes[i], &p) !=
			    CUDA_SUCCESS ||
		    p.poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
		    p.poolProps.location.id < 0 ||
		    p.poolProps.location.id >= GRAPH_DEVS)
			continue;
		bytes[p.poolProps.location.id] += vgpu__alloc_size(p.bytesize);
	}
	ok = true;
out:
	if (nodes != stack)
		free(nodes);
	return ok;
}

/* Gives back the charges of devices below upto. */
static void unreserve(const uint64_t bytes[GRAPH_DEVS], int upto)
{
	for (int d = 0; d < upto; d++)
		if (bytes[d])
			vgpu__uncharge(vgpu__dev_peek(d), VGPU_USAGE_GRAPH,
				       bytes[d]);
}

/* Reserves what an exec of g will take; bytes[] keeps what was charged on
 * each accounted device. CUDA_SUCCESS, or the first refusal (nothing kept). */
static CUresult reserve(CUgraph g, uint64_t bytes[GRAPH_DEVS])
{
	struct vgpu_dev *dv;
	CUresult r;

	if (!g || !graph_mem(g, bytes))
		return CUDA_SUCCESS;
	for (int d = 0; d < GRAPH_DEVS; d++) {
		if (!bytes[d])
			continue;
		dv = vgpu__dev_attach(d);
		if (!dv || !dv->slot) {
			bytes[d] = 0;
			if (vgpu__dev_failed(dv)) {
				unreserve(bytes, d);
				return CUDA_ERROR_INVALID_DEVICE;
			}
			continue;
		}
		if (bytes[d] > VGPU_TRACK_MAX_BYTES)
			r = CUDA_ERROR_OUT_OF_MEMORY;
		else
			r = vgpu__charge(dv, VGPU_USAGE_GRAPH, bytes[d]);
		if (r != CUDA_SUCCESS) {
			unreserve(bytes, d);
			return r;
		}
	}
	return CUDA_SUCCESS;
}

/* The driver's answer r for the exec: the charges kept under its handle,
 * or given back. Returns r. */
static CUresult commit(CUgraphExec x, const uint64_t bytes[GRAPH_DEVS],
		       CUresult r)
{
	if (r != CUDA_SUCCESS) {
		unreserve(bytes, GRAPH_DEVS);
		return r;
	}
	for (int d = 0; d < GRAPH_DEVS; d++)
		if (bytes[d])
			vgpu__track_charged(VGPU_TRACK_HANDLE,
					    (uint64_t)(uintptr_t)x + (unsigned)d,
					    VGPU_USAGE_GRAPH, d, bytes[d], 0);
	return r;
}

CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
			    CUgraphNode *phErrorNode, char *logBuffer,
			    size_t bufferSize)
{
	uint64_t bytes[GRAPH_DEVS] = { 0 };
	CUresult r;

	if (!vgpu__real.cuGraphInstantiate)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!phGraphExec || (r = reserve(hGraph, bytes)) != CUDA_SUCCESS)
		return !phGraphExec
			       ? vgpu__real.cuGraphInstantiate(phGraphExec,
					hGraph, phErrorNode, logBuffer,
					bufferSize)
			       : r;
	r = vgpu__real.cuGraphInstantiate(phGraphExec, hGraph, phErrorNode,
					  logBuffer, bufferSize);
	return commit(r == CUDA_SUCCESS ? *phGraphExec : NULL, bytes, r);
}

CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
			       CUgraphNode *phErrorNode, char *logBuffer,
			       size_t bufferSize)
{
	uint64_t bytes[GRAPH_DEVS] = { 0 };
	CUresult r;

	if (!vgpu__real.cuGraphInstantiate_v2)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!phGraphExec || (r = reserve(hGraph, bytes)) != CUDA_SUCCESS)
		return !phGraphExec
			       ? vgpu__real.cuGraphInstantiate_v2(phGraphExec,
					hGraph, phErrorNode, logBuffer,
					bufferSize)
			       : r;
	r = vgpu__real.cuGraphInstantiate_v2(phGraphExec, hGraph, phErrorNode,
					     logBuffer, bufferSize);
	return commit(r == CUDA_SUCCESS ? *phGraphExec : NULL, bytes, r);
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
				     unsigned long long flags)
{
	uint64_t bytes[GRAPH_DEVS] = { 0 };
	CUresult r;

	if (!vgpu__real.cuGraphInstantiateWithFlags)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!phGraphExec || (r = reserve(hGraph, bytes)) != CUDA_SUCCESS)
		return !phGraphExec
			       ? vgpu__real.cuGraphInstantiateWithFlags(
					phGraphExec, hGraph, flags)
			       : r;
	r = vgpu__real.cuGraphInstantiateWithFlags(phGraphExec, hGraph, flags);
	return commit(r == CUDA_SUCCESS ? *phGraphExec : NULL, bytes, r);
}

/* A refusal the driver would report in the parameters' result field is
 * reported there too. */
static CUresult with_params(CUgraphExec *phGraphExec, CUgraph hGraph,
			    CUDA_GRAPH_INSTANTIATE_PARAMS *params, bool ptsz)
{
	uint64_t bytes[GRAPH_DEVS] = { 0 };
	CUresult r;

	if (!phGraphExec || !params)
		goto call;
	if ((r = reserve(hGraph, bytes)) != CUDA_SUCCESS) {
		params->result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
		return r;
	}
call:
	r = ptsz ? vgpu__real.cuGraphInstantiateWithParams_ptsz(phGraphExec,
								hGraph, params)
		 : vgpu__real.cuGraphInstantiateWithParams(phGraphExec, hGraph,
							   params);
	return commit(r == CUDA_SUCCESS && phGraphExec ? *phGraphExec : NULL,
		      bytes, r);
}

CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec,
				      CUgraph hGraph,
				      CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
	if (!vgpu__real.cuGraphInstantiateWithParams)
		return CUDA_ERROR_NOT_INITIALIZED;
	return with_params(phGraphExec, hGraph, params, false);
}

CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec,
					   CUgraph hGraph,
					   CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
	if (!vgpu__real.cuGraphInstantiateWithParams_ptsz)
		return CUDA_ERROR_NOT_INITIALIZED;
	return with_params(phGraphExec, hGraph, params, true);
}

/* The exec's memory goes back to the driver with it. */
CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
	struct vgpu_tracked t[GRAPH_DEVS];
	bool known[GRAPH_DEVS];
	uint64_t key = (uint64_t)(uintptr_t)hGraphExec;
	CUresult r;

	if (!vgpu__real.cuGraphExecDestroy)
		return CUDA_ERROR_NOT_INITIALIZED;
	for (int d = 0; d < GRAPH_DEVS; d++)
		known[d] = hGraphExec &&
			   vgpu__track_remove(VGPU_TRACK_HANDLE, key + (unsigned)d,
					      &t[d]);
	r = vgpu__real.cuGraphExecDestroy(hGraphExec);
	for (int d = 0; d < GRAPH_DEVS; d++) {
		if (!known[d])
			continue;
		if (r != CUDA_SUCCESS)
			vgpu__track_insert(VGPU_TRACK_HANDLE, key + (unsigned)d,
					   &t[d]);
		else
			vgpu__uncharge(vgpu__dev_peek(d), VGPU_USAGE_GRAPH,
				       t[d].bytes);
	}
	return r;
}
