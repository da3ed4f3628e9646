/* test_host.c - the host forms of the workload kernels. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <criterion/criterion.h>

#include "vgpu_kernels.h"

#define N_ELEMS 1000

/* A fake clock: busy_until() records the deadline and jumps the clock to it. */
static uint64_t fake_now;
static uint64_t fake_deadline;
static int fake_waits;

static uint64_t fake_now_ns(void)
{
	return fake_now;
}

static void fake_busy_until(uint64_t deadline_ns)
{
	fake_deadline = deadline_ns;
	fake_waits++;
	fake_now = deadline_ns;
}

/* What the host forms report touching, when reporting is on (off, the
 * callback is NULL, as a caller without a bus model leaves it). */
static bool reports_on;
static struct { const void *ptr; uint64_t bytes; } reports[8];
static int nreports;

static void fake_touched(const void *ptr, uint64_t bytes)
{
	cr_assert_lt(nreports, 8);
	reports[nreports].ptr = ptr;
	reports[nreports].bytes = bytes;
	nreports++;
}

static void report_is(int i, const void *ptr, uint64_t bytes)
{
	cr_assert_eq(reports[i].ptr, ptr, "report %d", i);
	cr_assert_eq(reports[i].bytes, bytes, "report %d: %llu bytes", i,
		     (unsigned long long)reports[i].bytes);
}

static void put(unsigned char *p, size_t off, const void *v, size_t n)
{
	memcpy(p + off, v, n);
}

static void put_ptr(unsigned char *p, size_t off, const void *v)
{
	uint64_t u = (uint64_t)(uintptr_t)v;

	put(p, off, &u, sizeof(u));
}

static void run(const char *name, const unsigned char *params, size_t size)
{
	const struct vgpu_kernel_impl *k = vgpu_kernels_find(name);
	struct vgpu_kernel_launch l = {
		.grid = { 3, 1, 1 },
		.block = { 32, 1, 1 },
		.params = params,
		.params_size = size,
		.now_ns = fake_now_ns,
		.busy_until = fake_busy_until,
		.touched = reports_on ? fake_touched : NULL,
	};

	cr_assert_not_null(k, "%s not found", name);
	cr_assert_eq(k->params_size, size);
	k->fn(&l);
}

static void run_touch(uint32_t *buf, uint64_t n, uint32_t expect,
		      uint32_t write, unsigned long long *mism)
{
	unsigned char p[32] = { 0 };

	put_ptr(p, 0, buf);
	put(p, 8, &n, 8);
	put(p, 16, &expect, 4);
	put(p, 20, &write, 4);
	put_ptr(p, 24, mism);
	run("vgpu_touch", p, sizeof(p));
}

static void run_saxpy(uint64_t n, float a, const float *x, float *y)
{
	unsigned char p[32] = { 0 };

	put(p, 0, &n, 8);
	put(p, 8, &a, 4);
	put_ptr(p, 16, x);
	put_ptr(p, 24, y);
	run("vgpu_saxpy", p, sizeof(p));
}

static void run_spin(uint64_t ns, unsigned long long *times)
{
	unsigned char p[16] = { 0 };

	put(p, 0, &ns, 8);
	put_ptr(p, 8, times);
	run("vgpu_spin", p, sizeof(p));
}

Test(kernels, find_knows_the_three_and_nothing_else)
{
	cr_assert_eq(vgpu_kernels_find("vgpu_spin")->params_size, 16);
	cr_assert_eq(vgpu_kernels_find("vgpu_touch")->params_size, 32);
	cr_assert_eq(vgpu_kernels_find("vgpu_saxpy")->params_size, 32);
	cr_assert_null(vgpu_kernels_find("vgpu_nothing"));
	cr_assert_null(vgpu_kernels_find("user_scale"));
	cr_assert_null(vgpu_kernels_find("vgpu_spi"));
	cr_assert_null(vgpu_kernels_find(""));
	cr_assert_null(vgpu_kernels_find(NULL));
}

Test(kernels, saxpy_known_vectors)
{
	float x[5] = { 1.0f, -2.0f, 0.5f, 3.0f, 1e20f };
	float y[5] = { 0.25f, 4.0f, -1.0f, 0.0f, 1.0f };
	const float want[5] = { 2.25f, 0.0f, 0.0f, 6.0f, 2e20f };

	run_saxpy(5, 2.0f, x, y);
	for (int i = 0; i < 5; i++)
		cr_assert_eq(y[i], want[i], "y[%d] = %a, want %a", i,
			     (double)y[i], (double)want[i]);
	cr_assert_eq(x[1], -2.0f, "x must not change");
}

/* The CUDA form rounds a*x before the add; a fused multiply-add would not. */
Test(kernels, saxpy_rounds_product_then_sum)
{
	float e = 1.0f + 0x1p-12f;
	float x[1] = { e };
	float y[1] = { -1.0f };

	run_saxpy(1, e, x, y);
	/* e*e = 1 + 2^-11 + 2^-24 rounds to 1 + 2^-11 (a tie, to even);
	 * fused, the result would be 2^-11 + 2^-24. */
	cr_assert_eq(y[0], 0x1p-11f, "got %a", (double)y[0]);
}

Test(kernels, saxpy_n_zero_touches_nothing)
{
	float x[1] = { 1.0f };
	float y[1] = { 7.0f };

	run_saxpy(0, 2.0f, x, y);
	cr_assert_eq(y[0], 7.0f);
}

Test(kernels, touch_writes_the_pattern)
{
	static uint32_t buf[N_ELEMS];

	run_touch(buf, N_ELEMS, 0, 42, NULL);
	for (uint64_t i = 0; i < N_ELEMS; i++)
		cr_assert_eq(buf[i], vgpu_touch_pattern(42, i), "i=%lu",
			     (unsigned long)i);
}

Test(kernels, touch_counts_planted_mismatches)
{
	static uint32_t buf[N_ELEMS];
	unsigned long long mism = 0;

	run_touch(buf, N_ELEMS, 0, 7, NULL);
	buf[0] ^= 1;
	buf[500] = ~buf[500];
	buf[N_ELEMS - 1] += 1;
	run_touch(buf, N_ELEMS, 7, 8, &mism);
	cr_assert_eq(mism, 3);
	for (uint64_t i = 0; i < N_ELEMS; i++)
		cr_assert_eq(buf[i], vgpu_touch_pattern(8, i));

	/* Counts add to what is there, as atomicAdd does. */
	run_touch(buf, N_ELEMS, 8, 9, &mism);
	cr_assert_eq(mism, 3);
	run_touch(buf, N_ELEMS, 8, 9, &mism);
	cr_assert_eq(mism, 3 + N_ELEMS);
}

Test(kernels, touch_stays_inside_n)
{
	uint32_t buf[4] = { 11, 22, 33, 44 };

	run_touch(buf, 3, 0, 5, NULL);
	cr_assert_eq(buf[2], vgpu_touch_pattern(5, 2));
	cr_assert_eq(buf[3], 44);
}

Test(kernels, spin_waits_exactly_ns_from_start)
{
	unsigned long long times[2] = { 0, 0 };

	fake_now = 1000000;
	fake_waits = 0;
	run_spin(250000, times);
	cr_assert_eq(fake_waits, 1);
	cr_assert_eq(fake_deadline, 1000000 + 250000);
	cr_assert_eq(times[0], 1000000);
	cr_assert_eq(times[1], 1250000);
}

Test(kernels, spin_without_times)
{
	fake_now = 5;
	fake_waits = 0;
	run_spin(10, NULL);
	cr_assert_eq(fake_waits, 1);
	cr_assert_eq(fake_deadline, 15);
}

/* Each pass over a buffer is reported: vgpu_touch writes its buffer (and
 * reads it first when it checks), saxpy reads x and reads and writes y;
 * vgpu_spin touches nothing. */
Test(kernels, host_forms_report_their_traffic)
{
	static uint32_t buf[N_ELEMS];
	unsigned long long mism = 0, times[2];
	float x[3] = { 1, 2, 3 }, y[3] = { 0 };

	reports_on = true;
	run_touch(buf, N_ELEMS, 0, 1, NULL);
	cr_assert_eq(nreports, 1);
	report_is(0, buf, sizeof(buf));
	nreports = 0;
	run_touch(buf, 10, 1, 2, &mism);
	cr_assert_eq(nreports, 2);
	report_is(0, buf, 40);
	report_is(1, buf, 40);
	nreports = 0;
	run_saxpy(3, 2.0f, x, y);
	cr_assert_eq(nreports, 3);
	report_is(0, x, sizeof(x));
	report_is(1, y, sizeof(y));
	report_is(2, y, sizeof(y));
	nreports = 0;
	run_saxpy(0, 2.0f, x, y);
	run_touch(buf, 0, 0, 1, NULL);
	run_spin(10, times);
	cr_assert_eq(nreports, 0);
}
