/* dlsym.S - libvgpu-hip.so's dlsym (x86-64): asks vgpu__hip_dlsym_name
 * (smi.c) whether the lookup is one of the ROCm SMI functions this library
 * hooks, in the loaded ROCm SMI's handle; if so it returns the hook, else
 * it tail-jumps to the real dlsym, so that the real one sees the original
 * caller's return address (RTLD_NEXT still means the next after it).
 * Exported as dlsym@@GLIBC_2.34 and dlsym@GLIBC_2.2.5 (the map), the
 * versions programs refer to.
 */
	.text
	.globl	vgpu__hip_dlsym
	.type	vgpu__hip_dlsym, @function
	.p2align 4
vgpu__hip_dlsym:
	pushq	%rdi
	pushq	%rsi
	subq	$8, %rsp
	call	vgpu__hip_dlsym_name
	addq	$8, %rsp
	popq	%rsi
	popq	%rdi
	testq	%rax, %rax
	jnz	1f
	jmp	*vgpu__real_dlsym(%rip)
1:	ret
	.size	vgpu__hip_dlsym, .-vgpu__hip_dlsym

	.symver	vgpu__hip_dlsym, dlsym@@GLIBC_2.34
	.globl	vgpu__hip_dlsym_old
	.set	vgpu__hip_dlsym_old, vgpu__hip_dlsym
	.symver	vgpu__hip_dlsym_old, dlsym@GLIBC_2.2.5

	.section .note.GNU-stack,"",@progbits
