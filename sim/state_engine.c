/* state_engine.c - the simulated device's execution engine and its record
 * of what ran, in the state file shared by every process using the device.
 *
 * Kernels take multiprocessors (SMs), all of them for an ordinary context, k
 * for a green context of k, and are admitted first come first served (a
 * ticket queue across all processes) while the SMs held by running kernels
 * fit in the device. Neither the queue nor the holds are a lock a stopped
 * process keeps: a turn whose process is dead, stopped, or silent for
 * STALL_NS is passed on, and a kernel's hold of SMs is an entry of the hold
 * table whose one word says whether, and until when, it holds them, so that
 * any process can end a hold whose time is up (its holder stopped, or late)
 * without its holder's help.
 */
#include "state_internal.h"
#include "vgpu_sim_record.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define STALE_WAIT_NS 5000000ull               /* liveness check period */
#define STALL_NS 100000000ull                  /* a turn with no sign of life */

/* The calling thread's id (thread_id), cached: one system call per thread.
 * A forked child's copy of the forking thread's is cleared by
 * vsim_engine_forget. */
static _Thread_local int32_t tid_cache;

void vsim_engine_forget(void)
{
	tid_cache = 0;
}

/* ---- the queue and the holds -----------------------------------------------
 *
 * A kernel is admitted at the head of the ticket queue once the SMs it needs
 * are free, and holds them in an entry of the hold table, whose word is:
 *
 *   0                   free
 *   RESERVED | owner    taken by the head of the queue, holding nothing yet
 *   OPEN | start        holding; its end is not known: its host form computes
 *   TIMED | deadline    holding until deadline: its host form waits till then
 *   ENDED | end         its SMs were given back at end; the holder frees it
 *                       (anyone, once the holder is dead)
 *
 * The stop rule: a hold's SMs are free from its deadline on, whatever its
 * host thread does, as a real GPU does not stop with the process. Any
 * process that finds a TIMED hold past its deadline ends it there; an OPEN
 * hold whose thread is stopped (SIGSTOP, a debugger) is ended when found so;
 * a dead holder's hold is ended at its deadline or when found dead, whichever
 * comes first (a driver tears a dead process's context down). Each end is one
 * compare-and-swap of the word and appends the hold's interval to the record,
 * so a hold ends once: a late holder's own release finds it ENDED and only
 * frees the entry.
 *
 * Only the head of the queue reserves entries and admits kernels; others only
 * end holds. So the SMs held can only fall between the head's count and its
 * admission.
 */

enum hold_state {
	HOLD_RESERVED = 0,
	HOLD_OPEN = 1,
	HOLD_TIMED = 2,
	HOLD_ENDED = 3,
};

#define HOLD_VALUE_MAX ((1ull << 62) - 1)
#define NO_HOLD UINT32_MAX

static uint64_t hold_word(enum hold_state st, uint64_t value)
{
	if (value > HOLD_VALUE_MAX)
		value = HOLD_VALUE_MAX;
	return value << 2 | (uint64_t)st;
}

static enum hold_state hold_state(uint64_t w)
{
	return (enum hold_state)(w & 3);
}

static uint64_t hold_value(uint64_t w)
{
	return w >> 2;
}

static long futex_wait(_Atomic uint32_t *addr, uint32_t val, uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull),
			       (long)(ns % 1000000000ull) };

	return syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, &ts,
		       NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr)
{
	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static int32_t thread_id(void)
{
	if (!tid_cache)
		tid_cache = (int32_t)syscall(SYS_gettid);
	return tid_cache;
}

void vsim_pidns_self(uint64_t *ino, uint64_t *dev)
{
	struct stat st;

	*ino = *dev = 0;
	if (stat("/proc/self/ns/pid", &st) == 0) {
		*ino = (uint64_t)st.st_ino;
		*dev = (uint64_t)st.st_dev;
	}
}

/* True when thread tid of slot s's process is stopped (SIGSTOP and its
 * kin, or a debugger). Only within our pid namespace, where its ids mean
 * the same; anything unknown reads as running. */
static bool thread_stopped(const struct state_slot *s, int32_t pid,
			   int32_t tid)
{
	char path[64], buf[256], *p;
	uint64_t ino, dev;
	ssize_t n;
	int fd;

	vsim_pidns_self(&ino, &dev);
	if (!ino || ino != s->pidns_ino || dev != s->pidns_dev)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid,
		 (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	p = strrchr(buf, ')');	/* the command name may hold anything */
	return p && p[1] == ' ' && (p[2] == 'T' || p[2] == 't');
}

/* True while the process that took a hold as (slot, pid) is alive. */
static bool owner_alive(const struct dev_state *d, uint32_t slot, int32_t pid)
{
	const struct state_slot *s;

	if (slot >= STATE_SLOTS)
		return false;
	s = &d->sh->slots[slot];
	if (!atomic_load(&s->claimed) || s->pid != pid)
		return false;
	return vsim_slot_alive(d, (int)slot);
}

/* True when slot's process is stopped (its main thread: SIGSTOP stops them
 * all), read as thread_stopped does. */
static bool process_stopped(const struct dev_state *d, uint32_t slot)
{
	const struct state_slot *s = &d->sh->slots[slot];

	return atomic_load(&s->claimed) && s->pid > 0 &&
	       thread_stopped(s, s->pid, s->pid);
}

/* The ticket being served belongs to a dead or stopped process, or its
 * process gave no sign of life (head_beat) for STALL_NS (stopped where its
 * state cannot be read, or never registered the ticket): pass it on so the
 * engine never stays stuck. A process whose turn was passed finds it so
 * when it goes on, and queues again. quiet_ns: how long the turn has been
 * without a sign of life. */
static void skip_stale(struct dev_state *d, uint32_t s, uint64_t quiet_ns)
{
	struct state_file *sh = d->sh;
	uint64_t entry = atomic_load(&sh->ring[s % STATE_RING]);
	uint32_t slot = (uint32_t)entry % STATE_SLOTS;
	bool stale = quiet_ns >= STALL_NS;

	if (!stale && (uint32_t)(entry >> 32) == s)
		stale = !vsim_slot_alive(d, slot) ||
			(int32_t)(s - atomic_load(
				&sh->slots[slot].first_ticket)) < 0 ||
			process_stopped(d, slot);
	if (stale && atomic_compare_exchange_strong(&sh->serving, &s, s + 1))
		futex_wake_all(&sh->serving);
}

/* Waits for the turn of ticket t, passing on those of dead, stopped and
 * silent processes. False when t itself was passed on (this process was
 * stopped, or slow, meanwhile). */
static bool wait_turn(struct dev_state *d, uint32_t t)
{
	struct state_file *sh = d->sh;
	uint32_t seen = atomic_load(&sh->serving), s;
	uint64_t since = vsim_now_ns();

	while ((s = atomic_load(&sh->serving)) != t) {
		uint64_t now, beat;

		if ((int32_t)(s - t) > 0)
			return false;
		if (s != seen) {
			seen = s;
			since = vsim_now_ns();
		}
		if (futex_wait(&sh->serving, s, STALE_WAIT_NS) == 0 ||
		    errno != ETIMEDOUT)
			continue;
		now = vsim_now_ns();
		beat = atomic_load(&sh->head_beat);
		skip_stale(d, s, now - (beat > since && beat < now ? beat :
					since));
	}
	atomic_store(&sh->head_beat, vsim_now_ns());
	return true;
}

static uint32_t holds_hi(const struct state_file *sh)
{
	uint32_t hi = atomic_load(&sh->holds_hi);

	return hi < STATE_HOLDS ? hi : STATE_HOLDS;
}

/* A hold's fields, copied out. */
struct hold_info {
	uint64_t start_ns, ctx_id;
	int32_t pid, tid;
	uint32_t slot, sms;
};

static void hold_read(const struct state_hold *h, struct hold_info *out)
{
	const memory_order rx = memory_order_relaxed;

	*out = (struct hold_info){
		.start_ns = atomic_load_explicit(&h->start_ns, rx),
		.ctx_id = atomic_load_explicit(&h->ctx_id, rx),
		.pid = atomic_load_explicit(&h->pid, rx),
		.tid = atomic_load_explicit(&h->tid, rx),
		.slot = atomic_load_explicit(&h->slot, rx),
		.sms = atomic_load_explicit(&h->sms, rx),
	};
}

static void hold_write(struct state_hold *h, const struct hold_info *in)
{
	const memory_order rx = memory_order_relaxed;

	atomic_store_explicit(&h->start_ns, in->start_ns, rx);
	atomic_store_explicit(&h->ctx_id, in->ctx_id, rx);
	atomic_store_explicit(&h->pid, in->pid, rx);
	atomic_store_explicit(&h->tid, in->tid, rx);
	atomic_store_explicit(&h->slot, in->slot, rx);
	atomic_store_explicit(&h->sms, in->sms, rx);
}

static void raise_to(_Atomic uint64_t *word, uint64_t value)
{
	uint64_t was = atomic_load(word);

	while (was < value &&
	       !atomic_compare_exchange_weak(word, &was, value))
		;
}

/* The section "the record", below. */
static void record_append(struct state_file *sh, const struct hold_info *h,
			  uint64_t end);

/* Ends hold h, last seen holding as w, at `end`: its SMs are free, its
 * interval is recorded, waiters are told. False when its word changed
 * first (its holder, or another process, got there before). The fields are
 * read before the swap: once ENDED, the holder may free the entry. */
static bool hold_end(struct state_file *sh, struct state_hold *h, uint64_t w,
		     uint64_t end)
{
	struct hold_info copy;

	hold_read(h, &copy);
	/* An OPEN hold's start is its word's: its holder moves it there. */
	if (hold_state(w) == HOLD_OPEN)
		copy.start_ns = hold_value(w);
	if (end < copy.start_ns)
		end = copy.start_ns;
	/* Raised before the swap, so that whoever finds the SMs free finds
	 * the floor too (vsim_engine_start). A swap lost raises it to an
	 * end no later than the winner's: harmless. */
	raise_to(&sh->last_end, end);
	if (!atomic_compare_exchange_strong(&h->word, &w,
					    hold_word(HOLD_ENDED, end)))
		return false;
	record_append(sh, &copy, end);
	atomic_fetch_add(&sh->sm_released, 1);
	futex_wake_all(&sh->sm_released);
	return true;
}

/* SMs held now. Holds past their deadline are ended on the way (at their
 * deadline). *next: the earliest deadline of those still holding, or
 * UINT64_MAX. */
static uint32_t holds_count(struct state_file *sh, uint64_t *next)
{
	uint32_t hi = holds_hi(sh), sum = 0;
	uint64_t now = vsim_now_ns();

	*next = UINT64_MAX;
	for (uint32_t i = 0; i < hi; i++) {
		struct state_hold *h = &sh->holds[i];
		uint64_t w = atomic_load(&h->word);

		while (w && hold_state(w) == HOLD_TIMED &&
		       hold_value(w) <= now &&
		       !hold_end(sh, h, w, hold_value(w)))
			w = atomic_load(&h->word);
		if (!w || hold_state(w) == HOLD_RESERVED ||
		    hold_state(w) == HOLD_ENDED)
			continue;
		sum += atomic_load_explicit(&h->sms, memory_order_relaxed);
		if (hold_state(w) == HOLD_TIMED && hold_value(w) < *next)
			*next = hold_value(w);
	}
	return sum;
}

/* Ends the holds of dead processes (at their deadline, or now if that is
 * sooner) and frees their entries; ends the OPEN holds of stopped threads
 * now. System calls per hold: run every few milliseconds of waiting. */
static void holds_check(struct dev_state *d)
{
	struct state_file *sh = d->sh;
	uint32_t hi = holds_hi(sh);

	for (uint32_t i = 0; i < hi; i++) {
		struct state_hold *h = &sh->holds[i];
		uint64_t w = atomic_load(&h->word), now = vsim_now_ns(), end;
		enum hold_state st = hold_state(w);
		struct hold_info f;
		uint32_t slot;
		int32_t pid;

		if (!w)
			continue;
		hold_read(h, &f);
		slot = f.slot;
		pid = f.pid;
		if (st == HOLD_RESERVED) {
			slot = (uint32_t)(hold_value(w) & 0xffff);
			pid = (int32_t)(hold_value(w) >> 16);
		}
		if (!owner_alive(d, slot, pid)) {
			if (st == HOLD_OPEN || st == HOLD_TIMED) {
				end = st == HOLD_TIMED && hold_value(w) < now ?
				      hold_value(w) : now;
				if (!hold_end(sh, h, w, end))
					continue;	/* next time */
				w = hold_word(HOLD_ENDED, end);
			}
			atomic_compare_exchange_strong(&h->word, &w, 0);
			continue;
		}
		if (st == HOLD_OPEN && thread_stopped(&sh->slots[slot], pid,
						      f.tid))
			hold_end(sh, h, w, now);
	}
}

/* A free entry reserved for this process's next hold, or NO_HOLD when the
 * table is full. */
static uint32_t hold_reserve(struct dev_state *d)
{
	struct state_file *sh = d->sh;
	uint64_t owner = (uint64_t)(uint32_t)sh->slots[d->slot].pid << 16 |
			 (uint32_t)d->slot;

	for (uint32_t i = 0; i < STATE_HOLDS; i++) {
		uint64_t w = 0;

		if (atomic_load(&sh->holds[i].word) ||
		    !atomic_compare_exchange_strong(&sh->holds[i].word, &w,
				hold_word(HOLD_RESERVED, owner)))
			continue;
		if (atomic_load(&sh->holds_hi) < i + 1)
			atomic_store(&sh->holds_hi, i + 1);
		return i;
	}
	return NO_HOLD;
}

/* At the head of the queue (ticket t): waits until `need` SMs are free,
 * checking every few milliseconds for dead and stopped holders, and waking
 * at the earliest deadline. Returns the entry reserved for the hold, with
 * the SMs free; NO_HOLD when t was passed on meanwhile. */
static uint32_t wait_sms(struct dev_state *d, uint32_t t, uint32_t need)
{
	struct state_file *sh = d->sh;
	uint32_t entry = NO_HOLD;
	uint64_t checked = vsim_now_ns();

	for (;;) {
		uint32_t gen = atomic_load(&sh->sm_released);
		uint64_t next, now, wait = STALE_WAIT_NS;

		if (atomic_load(&sh->serving) != t) {
			if (entry != NO_HOLD)
				atomic_store(&sh->holds[entry].word, 0);
			return NO_HOLD;
		}
		atomic_store(&sh->head_beat, vsim_now_ns());
		if (entry == NO_HOLD)
			entry = hold_reserve(d);
		if (holds_count(sh, &next) + need <= sh->sm_total &&
		    entry != NO_HOLD)
			return entry;
		now = vsim_now_ns();
		if (now - checked >= STALE_WAIT_NS) {
			holds_check(d);
			checked = now;
			continue;
		}
		if (next > now && next - now < wait)
			wait = next - now;
		futex_wait(&sh->sm_released, gen, wait);
	}
}

void vsim_engine_acquire(int ordinal, unsigned sms, unsigned long long ctx_id,
			 struct vsim_hold *out)
{
	struct dev_state *d = &vsim_states[ordinal];
	struct state_file *sh = d->sh;
	struct state_hold *h;
	uint32_t t, need, i;
	uint64_t start, w;

	*out = (struct vsim_hold){ .ordinal = ordinal, .index = NO_HOLD };
	if (!sh) {
		out->start_ns = vsim_now_ns();
		return;
	}
	need = (sms == 0 || sms > sh->sm_total) ? sh->sm_total : sms;
	for (;;) {
		t = atomic_fetch_add(&sh->next_ticket, 1);
		atomic_store(&sh->ring[t % STATE_RING],
			     ((uint64_t)t << 32) | (uint32_t)d->slot);
		if (!wait_turn(d, t))
			continue;
		i = wait_sms(d, t, need);
		if (i == NO_HOLD)
			continue;
		h = &sh->holds[i];
		/* Stamped after the count that found the SMs free: after the
		 * end of whatever held them before. vsim_engine_start moves
		 * it on. */
		start = vsim_now_ns();
		hold_write(h, &(struct hold_info){
			.start_ns = start, .ctx_id = ctx_id,
			.pid = sh->slots[d->slot].pid, .tid = thread_id(),
			.slot = (uint32_t)d->slot, .sms = need,
		});
		w = hold_word(HOLD_OPEN, start);
		atomic_store(&h->word, w);
		/* Admitted, unless the turn was passed on since the count
		 * (this process was stopped there): then the hold goes back
		 * unused, and the kernel queues again. */
		if (atomic_compare_exchange_strong(&sh->serving, &t, t + 1))
			break;
		if (!atomic_compare_exchange_strong(&h->word, &w, 0))
			atomic_store(&h->word, 0);	/* ended: ours to free */
		atomic_fetch_add(&sh->sm_released, 1);
		futex_wake_all(&sh->sm_released);
	}
	/* The next in line may start while this kernel runs. */
	futex_wake_all(&sh->serving);
	*out = (struct vsim_hold){ .ordinal = ordinal, .index = i,
				   .sms = need, .start_ns = start };
}

static struct state_hold *hold_of(const struct vsim_hold *hh)
{
	struct state_file *sh = vsim_states[hh->ordinal].sh;

	return sh && hh->index != NO_HOLD ? &sh->holds[hh->index] : NULL;
}

uint64_t vsim_engine_start(struct vsim_hold *hh, uint64_t not_before,
			   uint64_t nominal_ns)
{
	struct state_hold *h = hold_of(hh);
	struct state_file *sh = vsim_states[hh->ordinal].sh;
	uint64_t now = vsim_now_ns(), start, w;

	/* On the device's clock the kernel starts once its stream reached it
	 * (not_before) and the SMs were free (the latest end of a hold
	 * ended before this one was admitted), however late this thread
	 * came to it: never later than now, never overlapping what held
	 * the SMs before (docs/simulator.md, "The device's clock"). */
	start = sh && h ? atomic_load(&sh->last_end) : 0;
	if (start < not_before)
		start = not_before;
	if (start > now || !not_before)
		start = now;
	if (!h) {
		hh->start_ns = start;
		return start;
	}
	/* The start is in an OPEN hold's word: one swap moves it, or finds
	 * the hold ended already (the thread stopped since its admission). */
	w = hold_word(HOLD_OPEN, hh->start_ns);
	if (!atomic_compare_exchange_strong(&h->word, &w,
					    hold_word(HOLD_OPEN, start)))
		return hh->start_ns;
	hh->start_ns = start;
	atomic_store_explicit(&h->start_ns, start, memory_order_relaxed);
	w = hold_word(HOLD_OPEN, start);
	if (nominal_ns)
		atomic_compare_exchange_strong(&h->word, &w,
			hold_word(HOLD_TIMED, start + nominal_ns));
	return start;
}

void vsim_engine_until(const struct vsim_hold *hh, uint64_t deadline_ns)
{
	struct state_hold *h = hold_of(hh);
	uint64_t w = h ? atomic_load(&h->word) : 0;
	uint64_t want = hold_word(HOLD_TIMED, deadline_ns);

	while (w && w != want && (hold_state(w) == HOLD_OPEN ||
				  hold_state(w) == HOLD_TIMED) &&
	       !atomic_compare_exchange_weak(&h->word, &w, want))
		;
	vsim_busy_until(deadline_ns);
}

uint64_t vsim_engine_release(const struct vsim_hold *hh, uint64_t lag_ns)
{
	struct state_file *sh = vsim_states[hh->ordinal].sh;
	struct state_hold *h = hold_of(hh);
	struct state_slot *s;
	uint64_t w, end, busy;

	if (!h)
		return vsim_now_ns() - lag_ns;
	for (;;) {
		uint64_t now = vsim_now_ns() - lag_ns;

		w = atomic_load(&h->word);
		if (!w || hold_state(w) == HOLD_RESERVED)
			return vsim_now_ns() - lag_ns;	/* not ours: never */
		if (hold_state(w) == HOLD_ENDED)
			break;
		end = hold_state(w) == HOLD_TIMED && hold_value(w) < now ?
		      hold_value(w) : now;
		hold_end(sh, h, w, end);
	}
	end = hold_value(w);
	/* Its own process adds its time: a slot is never counted into by a
	 * process that might outlive the slot's owner. */
	s = &sh->slots[vsim_states[hh->ordinal].slot];
	busy = sh->sm_total && end > hh->start_ns ?
	       (end - hh->start_ns) * hh->sms / sh->sm_total : 0;
	atomic_fetch_add(&s->busy_ns, busy);
	atomic_fetch_add(&s->kernels, 1);
	/* Only if still ours: never another kernel's entry. */
	atomic_compare_exchange_strong(&h->word, &w, 0);
	return end;
}

/* ---- the record ------------------------------------------------------------
 *
 * Every hold's interval, appended when it ends, to a ring of STATE_RECORD
 * entries (65536: 6.5 s of back-to-back 100 us kernels). A writer takes an
 * index with one fetch-add and writes the entry as a seqlock; a reader copies
 * an entry and keeps it only if its seq was index + 1 before and after.
 * Overflow: the oldest entries are overwritten, and the latest end among
 * them is kept (rec_lost_end), so a reader knows from when on its copy is
 * whole. An interval is appended at or after its end, so every interval
 * that reaches past rec_lost_end is still there.
 */

static void record_append(struct state_file *sh, const struct hold_info *h,
			  uint64_t end)
{
	uint64_t i = atomic_fetch_add(&sh->rec_next, 1);
	struct state_interval *r = &sh->record[i % STATE_RECORD];
	const memory_order rx = memory_order_relaxed, rl = memory_order_release;

	if (i >= STATE_RECORD)
		raise_to(&sh->rec_lost_end,
			 atomic_load_explicit(&r->end_ns, rx));
	/* Release stores (and acquire loads in record_copy), not fences,
	 * which ThreadSanitizer does not follow: a reader that sees any field
	 * of this write sees seq 0 or later when it looks again. */
	atomic_store_explicit(&r->seq, 0, rx);
	atomic_store_explicit(&r->start_ns, h->start_ns, rl);
	atomic_store_explicit(&r->end_ns, end, rl);
	atomic_store_explicit(&r->ctx_id, h->ctx_id, rl);
	atomic_store_explicit(&r->pid, h->pid, rl);
	atomic_store_explicit(&r->slot, h->slot, rl);
	atomic_store_explicit(&r->sms, h->sms, rl);
	atomic_store_explicit(&r->seq, i + 1, rl);
}

/* Copies interval i; false when it is being written or was overwritten. */
static bool record_copy(struct state_file *sh, uint64_t i,
			struct vsim_interval *out)
{
	struct state_interval *r = &sh->record[i % STATE_RECORD];
	const memory_order aq = memory_order_acquire;
	uint64_t seq = atomic_load_explicit(&r->seq, aq);

	if (seq != i + 1)
		return false;
	*out = (struct vsim_interval){
		.start_ns = atomic_load_explicit(&r->start_ns, aq),
		.end_ns = atomic_load_explicit(&r->end_ns, aq),
		.ctx_id = atomic_load_explicit(&r->ctx_id, aq),
		.pid = atomic_load_explicit(&r->pid, aq),
		.slot = atomic_load_explicit(&r->slot, aq),
		.sms = atomic_load_explicit(&r->sms, aq),
	};
	return atomic_load_explicit(&r->seq, memory_order_relaxed) == seq;
}

/* The device state a reader names: this process's ordinal, or a file. */
static struct dev_state *reader_open(const char *dir, int device,
				     struct dev_state *tmp)
{
	if (!dir)
		return device >= 0 && device < VSIM_MAX_DEVICES &&
		       vsim_states[device].sh ? &vsim_states[device] : NULL;
	return vsim_state_peek_open(dir, device, tmp) == 0 ? tmp : NULL;
}

VSIM_EXPORT long vsim_record_read(const char *dir, int device,
				  struct vsim_interval *out, size_t max,
				  struct vsim_record_info *info)
{
	struct dev_state tmp, *d = reader_open(dir, device, &tmp);
	struct vsim_record_info in = { 0 };
	uint64_t next, first, i;
	long n = 0;

	if (!d)
		return -1;
	/* Up to now: end the holds whose time is up. */
	holds_count(d->sh, &next);
	holds_check(d);
	in.sm_total = d->sh->sm_total;
	in.recorded = atomic_load(&d->sh->rec_next);
	in.lost = in.recorded > STATE_RECORD ? in.recorded - STATE_RECORD : 0;
	in.lost_end_ns = atomic_load(&d->sh->rec_lost_end);
	first = in.recorded - (max < in.recorded - in.lost ?
			       max : in.recorded - in.lost);
	for (i = first; i < in.recorded; i++) {
		if (record_copy(d->sh, i, &out[n]))
			n++;
		else
			in.torn++;
	}
	if (info)
		*info = in;
	if (d == &tmp)
		vsim_state_peek_close(d);
	return n;
}

VSIM_EXPORT long vsim_record_slots(const char *dir, int device,
				   struct vsim_slot_time *out, size_t max)
{
	struct dev_state tmp, *d = reader_open(dir, device, &tmp);
	uint32_t hi;
	long n = 0;

	if (!d)
		return -1;
	hi = atomic_load(&d->sh->slots_hi);
	for (uint32_t i = 0; i < hi && i < STATE_SLOTS && (size_t)n < max; i++) {
		const struct state_slot *s = &d->sh->slots[i];

		if (!atomic_load(&s->claimed))
			continue;
		out[n++] = (struct vsim_slot_time){
			.pid = s->pid, .slot = i,
			.busy_ns = atomic_load(&s->busy_ns),
			.kernels = atomic_load(&s->kernels),
		};
	}
	if (d == &tmp)
		vsim_state_peek_close(d);
	return n;
}
