/* trampolines.S - the forwarders' slow path and the dlopen catch (x86-64).
 *
 * vgpu__fwd_slow: a forwarder whose table slot is still empty jumps here
 * with its index in %r11 and every argument register untouched. The driver
 * is loaded (vgpu__real_load fills every slot, with an error stub where the
 * driver lacks a symbol), the registers restored, and the call goes on to
 * the real function as if the forwarder had jumped there itself.
 *
 * dlopen: asks vgpu__dlopen_name which name to open (it maps the driver's
 * names to "libcuda.so.1", which is this library) and tail-jumps to the
 * real dlopen, so the real one sees the original caller's return address
 * (dlopen uses it for the caller's RUNPATH and namespace).
 *
 * dlsym: asks vgpu__dlsym_name (nvml.c) whether the lookup is one of the
 * NVML functions this library hooks, in the real NVML's handle; if so it
 * returns the hook, else tail-jumps to the real dlsym, so that RTLD_NEXT
 * still means the next after the original caller.
 */
	.text

	.globl	vgpu__fwd_slow
	.hidden	vgpu__fwd_slow
	.type	vgpu__fwd_slow, @function
	.p2align 4
vgpu__fwd_slow:
	pushq	%rbp
	movq	%rsp, %rbp
	subq	$192, %rsp
	andq	$-16, %rsp
	movq	%rdi, 0(%rsp)
	movq	%rsi, 8(%rsp)
	movq	%rdx, 16(%rsp)
	movq	%rcx, 24(%rsp)
	movq	%r8, 32(%rsp)
	movq	%r9, 40(%rsp)
	movq	%r11, 48(%rsp)
	movq	%rax, 56(%rsp)
	movdqa	%xmm0, 64(%rsp)
	movdqa	%xmm1, 80(%rsp)
	movdqa	%xmm2, 96(%rsp)
	movdqa	%xmm3, 112(%rsp)
	movdqa	%xmm4, 128(%rsp)
	movdqa	%xmm5, 144(%rsp)
	movdqa	%xmm6, 160(%rsp)
	movdqa	%xmm7, 176(%rsp)
	call	vgpu__real_load
	movq	0(%rsp), %rdi
	movq	8(%rsp), %rsi
	movq	16(%rsp), %rdx
	movq	24(%rsp), %rcx
	movq	32(%rsp), %r8
	movq	40(%rsp), %r9
	movq	48(%rsp), %r11
	movq	56(%rsp), %rax
	movdqa	64(%rsp), %xmm0
	movdqa	80(%rsp), %xmm1
	movdqa	96(%rsp), %xmm2
	movdqa	112(%rsp), %xmm3
	movdqa	128(%rsp), %xmm4
	movdqa	144(%rsp), %xmm5
	movdqa	160(%rsp), %xmm6
	movdqa	176(%rsp), %xmm7
	movq	%rbp, %rsp
	popq	%rbp
	leaq	vgpu__fwd_table(%rip), %r10
	jmp	*(%r10,%r11,8)
	.size	vgpu__fwd_slow, .-vgpu__fwd_slow

	.globl	dlopen
	.type	dlopen, @function
	.p2align 4
dlopen:
	pushq	%rsi
	call	vgpu__dlopen_name
	popq	%rsi
	movq	%rax, %rdi
	jmp	*vgpu__real_dlopen(%rip)
	.size	dlopen, .-dlopen

	.globl	dlsym
	.type	dlsym, @function
	.p2align 4
dlsym:
	pushq	%rdi
	pushq	%rsi
	subq	$8, %rsp
	call	vgpu__dlsym_name
	addq	$8, %rsp
	popq	%rsi
	popq	%rdi
	testq	%rax, %rax
	jnz	1f
	jmp	*vgpu__real_dlsym(%rip)
1:	ret
	.size	dlsym, .-dlsym

	.section .note.GNU-stack,"",@progbits
