/* ledger_shares.c - memory shared between processes, charged once.
 *
 * Memory one process exports (a CUDA IPC handle, a VMM handle exported as
 * a file descriptor) and others import lives on the device while any of
 * them holds it, and only once. Each such memory has a record keyed by its
 * identity (the shim derives it from the handle: docs/memory.md): who
 * holds it (slot, generation, how many holds) and which holder pays (the
 * payer: the exporter first, whose slot carries the charge). Importers
 * hold it without being charged. When the payer lets go while others hold
 * it, or dies, the charge moves to one of them (their slot and tenant),
 * so it stays charged exactly as long as the device keeps the memory, and
 * a crash anywhere gives it back through the usual reclaim.
 *
 * Everything here is rare (export, import, the last free), so it takes the
 * shares lock (an OFD lock plus a process mutex, bounded) and then the
 * tenant locks it needs; the allocation path never comes here. A tenant
 * lock is never held when the shares lock is taken. Leaving and reclaiming
 * take it only for a slot that a record names: a process stopped holding
 * it holds up shared memory's operations, not processes that have none.
 *
 * Failures lean to charging too much, never too little: a charge moves by
 * adding it to the new payer before taking it from the old one (a death in
 * between leaves it charged twice); a hand-over that cannot take a lock in
 * time leaves the charge with the payer and its entry in the record, and
 * the payer's slot is then not given back on leave (it is reclaimed later,
 * when the hand-over is tried again).
 */
#include "ledger_internal.h"

#include <pthread.h>
#include <string.h>

#define H VGPU_LEDGER_SHARE_HOLDERS

static bool key_ok(const uint64_t key[2])
{
	return key && (key[0] || key[1]);
}

static int find(struct vgpu_ledger *l, const uint64_t key[2])
{
	for (int i = 0; i < VGPU_LEDGER_MAX_SHARES; i++)
		if (l->share[i].key[0] == key[0] && l->share[i].key[1] == key[1])
			return i;
	return -1;
}

/* A holder entry names a slot that is still the process that took it. */
static bool holder_live(struct vgpu_ledger *l, const struct vgpu_ledger_share *r,
			int pos)
{
	const struct vgpu_ledger_slot *s;

	if (!r->slot[pos] || r->slot[pos] > VGPU_LEDGER_MAX_SLOTS)
		return false;
	s = &l->slots[r->slot[pos] - 1];
	return r->count[pos] &&
	       __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == VGPU_SLOT_ACTIVE &&
	       __atomic_load_n(&s->generation, __ATOMIC_ACQUIRE) == r->gen[pos];
}

static int holder_of(const struct vgpu_ledger_share *r, uint32_t index,
		     uint32_t gen)
{
	for (int p = 0; p < H; p++)
		if (r->slot[p] == index + 1 && r->gen[p] == gen)
			return p;
	return -1;
}

/* A record read from a shared file may have been written by anyone: one
 * whose kind or payer is out of range is not used. */
static bool record_ok(const struct vgpu_ledger_share *r)
{
	return r->kind < VGPU_USAGE_COUNT && VGPU_USAGE_IS_DEVICE((int)r->kind)
	       && r->payer <= H;
}

/* One more hold by (index, gen): its entry, a free one, or one of a holder
 * that is gone (never the payer's: its charge is still in its slot). */
static int hold(struct vgpu_ledger *l, struct vgpu_ledger_share *r,
		uint32_t index, uint32_t gen)
{
	int p = holder_of(r, index, gen);

	if (p < 0)
		for (p = 0; p < H; p++)
			if (!r->slot[p] || ((uint32_t)p + 1 != r->payer &&
					    !holder_live(l, r, p)))
				break;
	if (p == H)
		return -1;
	if (r->slot[p] != index + 1 || r->gen[p] != gen) {
		r->slot[p] = index + 1;
		r->gen[p] = gen;
		r->count[p] = 0;
	}
	r->count[p]++;
	return p;
}

static void tenant_add(struct vgpu_ledger_tenant *ten, int kind, int64_t d)
{
	uint64_t have = vgpu__ld(&ten->usage[kind]);

	if (d < 0 && (uint64_t)-d > have)
		d = -(int64_t)have;
	vgpu__st(&ten->usage[kind], have + (uint64_t)d);
	if (VGPU_USAGE_IS_DEVICE(kind)) {
		have = vgpu__ld(&ten->used);
		if (d < 0 && (uint64_t)-d > have)
			d = -(int64_t)have;
		vgpu__st(&ten->used, have + (uint64_t)d);
	}
}

/* Moves the record's charge from holder `from` to holder `to` (to < 0:
 * gives it back), under both tenants' locks taken in index order. False,
 * with nothing changed, if a lock was not taken by the deadline. */
static bool move(struct vgpu_ledger *l, struct vgpu_ledger_share *r,
		 int from, int to, uint32_t owner, uint64_t deadline)
{
	struct vgpu_ledger_slot *a = &l->slots[r->slot[from] - 1], *b = NULL;
	uint32_t ta = __atomic_load_n(&a->tenant, __ATOMIC_RELAXED), tb = ta;
	uint32_t first, second;
	uint64_t have, bytes = r->bytes;
	int kind = (int)r->kind;

	if (to >= 0) {
		b = &l->slots[r->slot[to] - 1];
		tb = __atomic_load_n(&b->tenant, __ATOMIC_RELAXED);
	}
	if (ta >= VGPU_LEDGER_MAX_TENANTS || tb >= VGPU_LEDGER_MAX_TENANTS ||
	    !record_ok(r))
		return false;
	first = ta < tb ? ta : tb;
	second = ta < tb ? tb : ta;
	if (vgpu__tenant_lock_until(l, first, owner, deadline, NULL, 0))
		return false;
	if (second != first &&
	    vgpu__tenant_lock_until(l, second, owner, deadline, NULL, 0)) {
		vgpu__tenant_unlock(&l->tenants[first]);
		return false;
	}
	have = vgpu__ld(&a->usage[kind]);
	if (bytes > have)
		bytes = have;
	/* The new payer first: a death between the two leaves the memory
	 * charged twice (until the payers let go), never not at all. */
	if (b) {
		vgpu__add(&b->usage[kind], bytes);
		tenant_add(&l->tenants[tb], kind, (int64_t)bytes);
	}
	vgpu__st(&a->usage[kind], vgpu__ld(&a->usage[kind]) - bytes);
	tenant_add(&l->tenants[ta], kind, -(int64_t)bytes);
	if (second != first)
		vgpu__tenant_unlock(&l->tenants[second]);
	vgpu__tenant_unlock(&l->tenants[first]);
	return true;
}

static void free_record(struct vgpu_ledger *l, struct vgpu_ledger_share *r)
{
	memset(r, 0, sizeof(*r));
	__atomic_store_n(&l->shares->in_use, l->shares->in_use - 1,
			 __ATOMIC_RELEASE);
}

/* Holder `pos` of record r lets go of `n` holds (all of them if n is 0).
 * Under the shares lock. False when the payer's charge could not be moved
 * or given back in time: it stays with the payer, whose entry stays (with
 * no holds) for a later try. */
static bool let_go(struct vgpu_ledger *l, struct vgpu_ledger_share *r, int pos,
		   unsigned n, uint32_t owner, uint64_t deadline)
{
	bool payer = r->payer == (uint32_t)pos + 1;
	bool others = false;

	if (n && r->count[pos] > n) {
		r->count[pos] -= n;
		return true;
	}
	r->count[pos] = 0;
	if (!payer) {
		int q = r->payer && r->payer <= H ? (int)r->payer - 1 : -1;

		r->slot[pos] = 0;
		r->gen[pos] = 0;
		/* The last live holder gone while the payer holds nothing
		 * (its hand-over failed) or is dead and not yet reclaimed:
		 * the device has freed the memory, so the payer's charge
		 * goes now, not when its slot is next looked at. */
		for (int p = 0; p < H; p++)
			if (p != q && holder_live(l, r, p))
				return true;
		if (q >= 0 && r->slot[q] && r->slot[q] <= VGPU_LEDGER_MAX_SLOTS &&
		    (!r->count[q] ||
		     vgpu__slot_dead(l, r->slot[q] - 1, r->gen[q])) &&
		    record_ok(r) && move(l, r, q, -1, owner, deadline))
			free_record(l, r);
		return true;
	}
	if (!record_ok(r)) {		/* damaged: nothing safe to move */
		free_record(l, r);
		return true;
	}
	for (int p = 0; p < H; p++) {
		if (p == pos || !holder_live(l, r, p))
			continue;
		others = true;
		if (move(l, r, pos, p, owner, deadline)) {
			r->payer = (uint32_t)p + 1;
			vgpu__add(&l->shares->moves, 1);
			r->slot[pos] = 0;
			r->gen[pos] = 0;
			return true;
		}
	}
	/* Nobody else holds it: the device frees it, the charge goes. */
	if (!others && move(l, r, pos, -1, owner, deadline)) {
		free_record(l, r);
		return true;
	}
	return false;
}

int vgpu_ledger_share_export(struct vgpu_slot *s, const uint64_t key[2],
			     int kind, uint64_t bytes, bool *paid_elsewhere)
{
	struct vgpu_ledger *l = s->l;
	struct vgpu_ledger_share *r;
	uint32_t gen = __atomic_load_n(&s->rec->generation, __ATOMIC_ACQUIRE);
	int i, p, rc;

	*paid_elsewhere = false;
	if (!key_ok(key) || (unsigned)kind >= VGPU_USAGE_COUNT ||
	    !VGPU_USAGE_IS_DEVICE(kind))
		return VGPU_LEDGER_EINVAL;
	if ((rc = vgpu__shares_lock(l)))
		return rc;
	i = find(l, key);
	if (i >= 0) {
		r = &l->share[i];
		p = hold(l, r, s->index, gen);
		if (p < 0)
			rc = VGPU_LEDGER_EFULL;
		else
			*paid_elsewhere = r->payer != (uint32_t)p + 1;
		vgpu__shares_unlock(l);
		return rc ? rc : i;
	}
	for (i = 0; i < VGPU_LEDGER_MAX_SHARES && key_ok(l->share[i].key); i++)
		;
	if (i == VGPU_LEDGER_MAX_SHARES) {
		vgpu__shares_unlock(l);
		return VGPU_LEDGER_EFULL;
	}
	r = &l->share[i];
	memset(r, 0, sizeof(*r));
	r->bytes = bytes;
	r->kind = (uint32_t)kind;
	r->slot[0] = s->index + 1;
	r->gen[0] = gen;
	r->count[0] = 1;
	r->payer = 1;
	r->key[1] = key[1];
	r->key[0] = key[0];
	__atomic_store_n(&l->shares->in_use, l->shares->in_use + 1,
			 __ATOMIC_RELEASE);
	vgpu__shares_unlock(l);
	return i;
}

/* ---- the imports' payers ---------------------------------------------------- */

/* Under the shares lock: record i (r) is held by import (p its holder
 * entry), or no longer; what it is, kept for a move (ledger_move.c). */
static void imported_add(struct vgpu_slot *s, int i,
			 const struct vgpu_ledger_share *r, int p)
{
	uint32_t n = s->nimported;
	struct vgpu__import w = { { r->key[0], r->key[1] }, r->bytes,
				  r->kind, r->count[p] };

	for (uint32_t k = 0; k < n; k++)
		if (s->imported[k] == i) {
			s->imported_what[k] = w;
			return;
		}
	if (n == VGPU__IMPORTS_KEPT) {
		__atomic_store_n(&s->imported_more, true, __ATOMIC_RELAXED);
		return;
	}
	s->imported_what[n] = w;
	__atomic_store_n(&s->imported[n], i, __ATOMIC_RELAXED);
	__atomic_store_n(&s->nimported, n + 1, __ATOMIC_RELEASE);
}

/* Under the shares lock: record i is still held, count times. */
static void imported_count(struct vgpu_slot *s, int i, uint32_t count)
{
	for (uint32_t k = 0; k < s->nimported; k++)
		if (s->imported[k] == i)
			s->imported_what[k].count = count;
}

static void imported_remove(struct vgpu_slot *s, int i)
{
	uint32_t n = s->nimported;

	/* Once more than fit, every record is looked at for good, and the
	 * count stays non-zero (the reservation's one test). */
	if (__atomic_load_n(&s->imported_more, __ATOMIC_RELAXED))
		return;

	for (uint32_t k = 0; k < n; k++)
		if (s->imported[k] == i) {
			s->imported_what[k] = s->imported_what[n - 1];
			__atomic_store_n(&s->imported[k], s->imported[n - 1],
					 __ATOMIC_RELAXED);
			__atomic_store_n(&s->nimported, n - 1,
					 __ATOMIC_RELEASE);
			return;
		}
}

/* Whether record r, which s holds, is paid by another process that is
 * gone; then that slot's index (its OFD lock taken: the caller reclaims
 * and unlocks). Read without the shares lock: a torn read names some
 * slot, which is reclaimed only if its process is gone anyway. */
static bool payer_gone(struct vgpu_slot *s, const struct vgpu_ledger_share *r,
		       uint32_t gen, unsigned char *seen, uint32_t *idx)
{
	struct vgpu_ledger *l = s->l;
	uint32_t payer = __atomic_load_n(&r->payer, __ATOMIC_RELAXED);
	int p;

	if (!key_ok(r->key) || !payer || payer > H ||
	    (p = holder_of(r, s->index, gen)) < 0 || p == (int)payer - 1)
		return false;
	*idx = __atomic_load_n(&r->slot[payer - 1], __ATOMIC_RELAXED);
	if (!*idx || *idx > VGPU_LEDGER_MAX_SLOTS ||
	    __atomic_load_n(&l->slots[*idx - 1].state, __ATOMIC_ACQUIRE) !=
		    VGPU_SLOT_ACTIVE)
		return false;
	(*idx)--;
	/* Each payer slot once per look. */
	if (seen[*idx / 8] & (1u << (*idx % 8)))
		return false;
	seen[*idx / 8] |= (unsigned char)(1u << (*idx % 8));
	return !vgpu__slot_owned(l, *idx) && vgpu__slot_trylock(l, *idx);
}

/* Exporters killed while others held their memory kept its charge until
 * a process of their own tenant looked, while the importer's tenant,
 * charged nothing for it, allocated its whole slice besides: 256 MiB
 * over a 512 MiB slice on the device (a hostile review). So an
 * importer's reservations look at the payers of what it imported: at
 * most once per tick of the coarse clock (1 to 4 ms), one trylock (a
 * system call) per payer slot however many records it pays for, none
 * in a process that imports nothing. The reclaim only tries the locks
 * it needs: a stopped process of the dead payer's tenant holding that
 * tenant's lock made every reservation of the importer wait 2 s (a
 * second review); the next look tries again. */
void vgpu__shares_payers_check(struct vgpu_slot *s)
{
	struct vgpu_ledger *l = s->l;
	uint32_t gen = __atomic_load_n(&s->rec->generation, __ATOMIC_ACQUIRE);
	bool all = __atomic_load_n(&s->imported_more, __ATOMIC_RELAXED);
	uint32_t n = all ? VGPU_LEDGER_MAX_SHARES
			 : __atomic_load_n(&s->nimported, __ATOMIC_ACQUIRE);
	uint64_t now = vgpu__coarse_ns();
	unsigned char seen[(VGPU_LEDGER_MAX_SLOTS + 7) / 8] = { 0 };
	int cancel;

	if (now == __atomic_load_n(&s->payers_seen_ns, __ATOMIC_RELAXED) ||
	    !__atomic_load_n(&l->shares->in_use, __ATOMIC_ACQUIRE))
		return;
	__atomic_store_n(&s->payers_seen_ns, now, __ATOMIC_RELAXED);
	for (uint32_t k = 0; k < n; k++) {
		int32_t i = all ? (int32_t)k
				: __atomic_load_n(&s->imported[k],
						  __ATOMIC_RELAXED);
		uint32_t idx;

		if (i < 0 || i >= VGPU_LEDGER_MAX_SHARES ||
		    !payer_gone(s, &l->share[i], gen, seen, &idx))
			continue;
		/* Under l->mu: a move never grafts under a reclaim. */
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
		pthread_mutex_lock(&l->mu);
		if (__atomic_load_n(&l->slots[idx].state, __ATOMIC_ACQUIRE) ==
		    VGPU_SLOT_ACTIVE)
			vgpu__slot_reclaim(l, idx, 0);
		pthread_mutex_unlock(&l->mu);
		pthread_setcancelstate(cancel, NULL);
		vgpu__slot_unlock(l, idx);
	}
}

int vgpu_ledger_share_hold(struct vgpu_slot *s, const uint64_t key[2])
{
	struct vgpu_ledger *l = s->l;
	uint32_t gen = __atomic_load_n(&s->rec->generation, __ATOMIC_ACQUIRE);
	int i, p, rc;

	if (!key_ok(key))
		return VGPU_LEDGER_EINVAL;
	if (!__atomic_load_n(&l->shares->in_use, __ATOMIC_ACQUIRE))
		return VGPU_LEDGER_ENOENT;
	if ((rc = vgpu__shares_lock(l)))
		return rc;
	i = find(l, key);
	if (i < 0)
		rc = VGPU_LEDGER_ENOENT;
	else if ((p = hold(l, &l->share[i], s->index, gen)) < 0)
		rc = VGPU_LEDGER_EFULL;
	else
		imported_add(s, i, &l->share[i], p);
	vgpu__shares_unlock(l);
	return rc ? rc : i;
}

/* ---- imports carried over a move ------------------------------------------------- */

/* A file deleted or replaced while memory was shared: the records stayed
 * in the old file, so in the new one the exporter's release found none
 * and kept its charge until it left, and the importer, charged nothing,
 * then held the memory for free: 912 MiB on the device under a 512 MiB
 * slice (a hostile review). So a moving importer is charged what it
 * imported, as memory of a process the ledger does not know is, until it
 * lets go: charged twice while the exporter holds it too, never less. */
unsigned vgpu__shares_imports_of(struct vgpu_ledger *l, struct vgpu_slot *s,
				 uint64_t *have, struct vgpu__import *out)
{
	uint32_t gen = __atomic_load_n(&s->rec->generation, __ATOMIC_ACQUIRE);
	unsigned n = 0;

	if (!__atomic_load_n(&l->shares->in_use, __ATOMIC_ACQUIRE))
		return 0;
	for (int i = 0; i < VGPU_LEDGER_MAX_SHARES; i++) {
		const struct vgpu_ledger_share *r = &l->share[i];
		int p = key_ok(r->key) && record_ok(r)
			? holder_of(r, s->index, gen) : -1;

		if (p < 0 || (uint32_t)p + 1 == r->payer || !r->count[p])
			continue;
		have[r->kind] += r->bytes;
		if (n < VGPU__IMPORTS_KEPT)
			out[n++] = (struct vgpu__import){
				{ r->key[0], r->key[1] }, r->bytes, r->kind,
				r->count[p] };
	}
	return n;
}

unsigned vgpu__shares_imports_kept(struct vgpu_slot *s, uint64_t *have,
				   struct vgpu__import *out)
{
	unsigned n = 0;

	for (uint32_t k = 0; k < s->nimported; k++) {
		const struct vgpu__import *w = &s->imported_what[k];

		if (w->kind >= VGPU_USAGE_COUNT || !w->count)
			continue;
		have[w->kind] += w->bytes;
		out[n++] = *w;
	}
	return n;
}

void vgpu__shares_carried(struct vgpu_slot *s, const struct vgpu__import *in,
			  unsigned n)
{
	for (unsigned i = 0; i < n && s->ncarried < VGPU__IMPORTS_KEPT; i++)
		s->carried[s->ncarried++] = in[i];
	/* The records named by the old file's indices are gone. */
	__atomic_store_n(&s->imported_more, false, __ATOMIC_RELAXED);
	__atomic_store_n(&s->nimported, 0, __ATOMIC_RELEASE);
}

/* Under the shares lock: a drop of key that s carried over a move: its
 * charge given back at the last hold. */
static void carried_drop(struct vgpu_slot *s, const uint64_t key[2])
{
	for (uint32_t i = 0; i < s->ncarried; i++) {
		struct vgpu__import *c = &s->carried[i];

		if (c->key[0] != key[0] || c->key[1] != key[1])
			continue;
		if (c->count > 1) {
			c->count--;
			return;
		}
		vgpu_ledger_release(s, (int)c->kind, c->bytes);
		s->carried[i] = s->carried[--s->ncarried];
		return;
	}
}

int vgpu_ledger_share_drop(struct vgpu_slot *s, int idx, const uint64_t key[2])
{
	struct vgpu_ledger *l = s->l;
	struct vgpu_ledger_share *r;
	uint32_t gen = __atomic_load_n(&s->rec->generation, __ATOMIC_ACQUIRE);
	uint64_t deadline = vgpu__deadline();
	int p, rc;

	if (idx < 0 || idx >= VGPU_LEDGER_MAX_SHARES || !key_ok(key))
		return VGPU_LEDGER_EINVAL;
	if ((rc = vgpu__shares_lock_until(l, deadline)))
		return rc;
	r = &l->share[idx];
	/* A payer whose hand-over failed is tried again (its entry has no
	 * holds left); a drop that lets go of nothing is not an error. */
	if (r->key[0] == key[0] && r->key[1] == key[1] &&
	    (p = holder_of(r, s->index, gen)) >= 0 &&
	    !let_go(l, r, p, r->count[p] ? 1 : 0, s->owner, deadline))
		rc = VGPU_LEDGER_ETIMEDOUT;
	else if (r->key[0] != key[0] || r->key[1] != key[1])
		carried_drop(s, key);
	if (r->key[0] != key[0] || r->key[1] != key[1] ||
	    (p = holder_of(r, s->index, gen)) < 0)
		imported_remove(s, idx);
	else
		imported_count(s, idx, r->count[p]);
	vgpu__shares_unlock(l);
	return rc;
}

uint64_t vgpu_ledger_share_payer(const struct vgpu_slot *s, int idx,
				 int32_t *pid)
{
	const struct vgpu_ledger_share *r;
	uint32_t slot;

	*pid = 0;
	if (idx < 0 || idx >= VGPU_LEDGER_MAX_SHARES)
		return 0;
	r = &s->l->share[idx];
	if (!r->payer || r->payer > H)
		return 0;
	slot = r->slot[r->payer - 1];
	if (slot && slot <= VGPU_LEDGER_MAX_SLOTS)
		*pid = s->l->slots[slot - 1].pid;
	return r->bytes;
}

/* Whether any record names slot `index` (read without the lock: entries
 * with an index are added only by that slot's owner, which is leaving or
 * dead; an entry being freed at the moment reads as named, and the lock is
 * taken for nothing). */
static bool slot_named(struct vgpu_ledger *l, uint32_t index)
{
	for (int i = 0; i < VGPU_LEDGER_MAX_SHARES; i++)
		for (int p = 0; p < H; p++)
			if (__atomic_load_n(&l->share[i].slot[p],
					    __ATOMIC_RELAXED) == index + 1)
				return true;
	return false;
}

int vgpu__shares_slot_gone(struct vgpu_ledger *l, uint32_t index,
			   uint32_t owner, uint64_t deadline)
{
	int rc = 0;

	if (!__atomic_load_n(&l->shares->in_use, __ATOMIC_ACQUIRE) ||
	    !slot_named(l, index))
		return 0;
	if (vgpu__shares_lock_until(l, deadline))
		return VGPU_LEDGER_ETIMEDOUT;
	for (int i = 0; i < VGPU_LEDGER_MAX_SHARES; i++) {
		struct vgpu_ledger_share *r = &l->share[i];

		if (!key_ok(r->key))
			continue;
		/* Every entry of this slot's index is gone: its own, and any
		 * an earlier owner of the slot left behind. */
		for (int p = 0; p < H; p++)
			if (r->slot[p] == index + 1 &&
			    !let_go(l, r, p, 0, owner, deadline))
				rc = VGPU_LEDGER_ETIMEDOUT;
	}
	vgpu__shares_unlock(l);
	return rc;
}
