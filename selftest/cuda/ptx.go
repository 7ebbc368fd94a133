package cuda

// PTX of the copy phase's kernels, JIT-compiled by the driver at cuModuleLoadDataEx.
// ISA 7.0 / target sm_52 (selftest.md §7): one text serves sm_89 (RTX 4090) and sm_90
// (H100/H200) and loads on any driver since CUDA 11.0. Hand-written; every kernel is a
// grid-stride loop with 64-bit indices, so any launch size covers any buffer.
//
// The test pattern (Pattern in Go) mixes the 64-bit word index with a seed, so a
// word written at the wrong offset, a stale page or an aliased window shows:
//
//	h = (lo32(i) ^ seed) * 0x9E3779B1 + hi32(i);  h ^= h >> 16
const (
	kFill   = "pb_fill"
	kVerify = "pb_verify"
	kCopy   = "pb_copy_v4"
	kSpin   = "pb_spin"
)

// kernelPTX holds all four kernels of one module.
const kernelPTX = `.version 7.0
.target sm_52
.address_size 64

// pb_fill(ptr, nWords, seed): ptr[i] = pattern(i, seed)
.visible .entry pb_fill(
	.param .u64 pb_fill_ptr,
	.param .u64 pb_fill_n,
	.param .u32 pb_fill_seed
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<10>;
	.reg .b64 %rd<10>;

	ld.param.u64 %rd1, [pb_fill_ptr];
	ld.param.u64 %rd2, [pb_fill_n];
	ld.param.u32 %r1, [pb_fill_seed];
	cvta.to.global.u64 %rd1, %rd1;
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mul.wide.u32 %rd3, %r2, %r3;
	cvt.u64.u32 %rd4, %r4;
	add.u64 %rd3, %rd3, %rd4;
	mov.u32 %r5, %nctaid.x;
	mul.wide.u32 %rd5, %r5, %r3;
	setp.ge.u64 %p1, %rd3, %rd2;
	@%p1 bra FILL_DONE;
FILL_LOOP:
	cvt.u32.u64 %r6, %rd3;
	shr.u64 %rd6, %rd3, 32;
	cvt.u32.u64 %r7, %rd6;
	xor.b32 %r6, %r6, %r1;
	mul.lo.u32 %r6, %r6, 0x9E3779B1;
	add.u32 %r6, %r6, %r7;
	shr.u32 %r8, %r6, 16;
	xor.b32 %r6, %r6, %r8;
	shl.b64 %rd7, %rd3, 2;
	add.s64 %rd8, %rd1, %rd7;
	st.global.u32 [%rd8], %r6;
	add.u64 %rd3, %rd3, %rd5;
	setp.lt.u64 %p1, %rd3, %rd2;
	@%p1 bra FILL_LOOP;
FILL_DONE:
	ret;
}

// pb_verify(ptr, nWords, seed, result): for every i with ptr[i] != pattern(i, seed),
// result[0] += 1 (u64 count) and result[1] = min(result[1], i) (u64 first bad index).
// The caller sets result to {0, ~0} first.
.visible .entry pb_verify(
	.param .u64 pb_verify_ptr,
	.param .u64 pb_verify_n,
	.param .u32 pb_verify_seed,
	.param .u64 pb_verify_result
)
{
	.reg .pred %p<3>;
	.reg .b32 %r<10>;
	.reg .b64 %rd<14>;

	ld.param.u64 %rd1, [pb_verify_ptr];
	ld.param.u64 %rd2, [pb_verify_n];
	ld.param.u32 %r1, [pb_verify_seed];
	ld.param.u64 %rd9, [pb_verify_result];
	cvta.to.global.u64 %rd1, %rd1;
	cvta.to.global.u64 %rd9, %rd9;
	add.s64 %rd10, %rd9, 8;
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mul.wide.u32 %rd3, %r2, %r3;
	cvt.u64.u32 %rd4, %r4;
	add.u64 %rd3, %rd3, %rd4;
	mov.u32 %r5, %nctaid.x;
	mul.wide.u32 %rd5, %r5, %r3;
	setp.ge.u64 %p1, %rd3, %rd2;
	@%p1 bra VERIFY_DONE;
VERIFY_LOOP:
	cvt.u32.u64 %r6, %rd3;
	shr.u64 %rd6, %rd3, 32;
	cvt.u32.u64 %r7, %rd6;
	xor.b32 %r6, %r6, %r1;
	mul.lo.u32 %r6, %r6, 0x9E3779B1;
	add.u32 %r6, %r6, %r7;
	shr.u32 %r8, %r6, 16;
	xor.b32 %r6, %r6, %r8;
	shl.b64 %rd7, %rd3, 2;
	add.s64 %rd8, %rd1, %rd7;
	ld.global.u32 %r9, [%rd8];
	setp.eq.u32 %p2, %r9, %r6;
	@%p2 bra VERIFY_NEXT;
	atom.global.add.u64 %rd11, [%rd9], 1;
	atom.global.min.u64 %rd12, [%rd10], %rd3;
VERIFY_NEXT:
	add.u64 %rd3, %rd3, %rd5;
	setp.lt.u64 %p1, %rd3, %rd2;
	@%p1 bra VERIFY_LOOP;
VERIFY_DONE:
	ret;
}

// pb_copy_v4(dst, src, nVec): dst[i] = src[i] for 16-byte vectors, the load/store
// pattern NCCL's kernels use for P2P. dst or src may be a peer GPU's address.
// Grid-stride with S = all threads of the grid: each trip a thread issues four
// 16-byte loads, S vectors apart (every one coalesced across the warp), before the
// first store, so four loads per thread are in flight; one load at a time left the
// H200 at 72 % of its copy engine (issue 21). The tail (under 4S vectors) moves one
// vector per trip.
.visible .entry pb_copy_v4(
	.param .u64 pb_copy_v4_dst,
	.param .u64 pb_copy_v4_src,
	.param .u64 pb_copy_v4_n
)
{
	.reg .pred %p<3>;
	.reg .b32 %r<24>;
	.reg .b64 %rd<24>;

	ld.param.u64 %rd1, [pb_copy_v4_dst];
	ld.param.u64 %rd2, [pb_copy_v4_src];
	ld.param.u64 %rd3, [pb_copy_v4_n];
	cvta.to.global.u64 %rd1, %rd1;
	cvta.to.global.u64 %rd2, %rd2;
	mov.u32 %r1, %ctaid.x;
	mov.u32 %r2, %ntid.x;
	mov.u32 %r3, %tid.x;
	mul.wide.u32 %rd4, %r1, %r2;
	cvt.u64.u32 %rd5, %r3;
	add.u64 %rd4, %rd4, %rd5;
	mov.u32 %r4, %nctaid.x;
	mul.wide.u32 %rd6, %r4, %r2;
	shl.b64 %rd10, %rd6, 4;
	shl.b64 %rd11, %rd6, 2;
	shl.b64 %rd12, %rd6, 6;
	mul.lo.u64 %rd13, %rd6, 3;
	add.u64 %rd13, %rd4, %rd13;
	setp.ge.u64 %p1, %rd13, %rd3;
	@%p1 bra COPY_TAIL;
	shl.b64 %rd7, %rd4, 4;
	add.s64 %rd8, %rd2, %rd7;
	add.s64 %rd9, %rd1, %rd7;
COPY_LOOP4:
	add.s64 %rd14, %rd8, %rd10;
	add.s64 %rd15, %rd14, %rd10;
	add.s64 %rd16, %rd15, %rd10;
	ld.global.v4.u32 {%r5, %r6, %r7, %r8}, [%rd8];
	ld.global.v4.u32 {%r9, %r10, %r11, %r12}, [%rd14];
	ld.global.v4.u32 {%r13, %r14, %r15, %r16}, [%rd15];
	ld.global.v4.u32 {%r17, %r18, %r19, %r20}, [%rd16];
	add.s64 %rd17, %rd9, %rd10;
	add.s64 %rd18, %rd17, %rd10;
	add.s64 %rd19, %rd18, %rd10;
	st.global.v4.u32 [%rd9], {%r5, %r6, %r7, %r8};
	st.global.v4.u32 [%rd17], {%r9, %r10, %r11, %r12};
	st.global.v4.u32 [%rd18], {%r13, %r14, %r15, %r16};
	st.global.v4.u32 [%rd19], {%r17, %r18, %r19, %r20};
	add.s64 %rd8, %rd8, %rd12;
	add.s64 %rd9, %rd9, %rd12;
	add.u64 %rd4, %rd4, %rd11;
	add.u64 %rd13, %rd13, %rd11;
	setp.lt.u64 %p1, %rd13, %rd3;
	@%p1 bra COPY_LOOP4;
COPY_TAIL:
	setp.ge.u64 %p2, %rd4, %rd3;
	@%p2 bra COPY_DONE;
COPY_LOOP1:
	shl.b64 %rd7, %rd4, 4;
	add.s64 %rd8, %rd2, %rd7;
	add.s64 %rd9, %rd1, %rd7;
	ld.global.v4.u32 {%r5, %r6, %r7, %r8}, [%rd8];
	st.global.v4.u32 [%rd9], {%r5, %r6, %r7, %r8};
	add.u64 %rd4, %rd4, %rd6;
	setp.lt.u64 %p2, %rd4, %rd3;
	@%p2 bra COPY_LOOP1;
COPY_DONE:
	ret;
}

// pb_spin(flag, timeoutClocks): one thread polls the mapped host word flag[0] until
// it is non-zero or timeoutClocks of %clock64 have passed; on timeout it stores 1 in
// flag[1], so the host can tell that enqueue time leaked into the measurement.
.visible .entry pb_spin(
	.param .u64 pb_spin_flag,
	.param .u64 pb_spin_timeout
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<4>;
	.reg .b64 %rd<8>;

	ld.param.u64 %rd1, [pb_spin_flag];
	ld.param.u64 %rd2, [pb_spin_timeout];
	mov.u64 %rd3, %clock64;
SPIN_LOOP:
	ld.volatile.u32 %r1, [%rd1];
	setp.ne.u32 %p1, %r1, 0;
	@%p1 bra SPIN_DONE;
	mov.u64 %rd4, %clock64;
	sub.u64 %rd5, %rd4, %rd3;
	setp.lt.u64 %p1, %rd5, %rd2;
	@%p1 bra SPIN_LOOP;
	mov.u32 %r2, 1;
	st.volatile.u32 [%rd1+4], %r2;
SPIN_DONE:
	ret;
}
`

// PTX is the copy phase's module text, for checking it with ptxas on a GPU host
// (cudaprobe -dump-ptx); the driver JITs the same text at run time.
func PTX() string { return kernelPTX }

// Pattern is the word the fill kernel writes at word index i for seed; the verify
// kernel checks against the same function.
func Pattern(i uint64, seed uint32) uint32 {
	h := (uint32(i) ^ seed) * 0x9E3779B1
	h += uint32(i >> 32)
	return h ^ h>>16
}
