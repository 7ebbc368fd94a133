package nccl

// PTX is the all-reduce kernels' module text, for checking it with ptxas on a GPU
// host (cudaprobe -dump-ptx).
func PTX() string { return reducePTX }

// reducePTX fills and checks all-reduce buffers (ISA 7.0 / sm_52, like selftest/cuda's
// kernels; see Value and Expected for the numbers).
const reducePTX = `.version 7.0
.target sm_52
.address_size 64

// pb_rank_fill(ptr, n, rank): ptr[i] = Value(rank, i) as int32
.visible .entry pb_rank_fill(
	.param .u64 pb_rank_fill_ptr,
	.param .u64 pb_rank_fill_n,
	.param .u32 pb_rank_fill_rank
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<10>;
	.reg .b64 %rd<10>;

	ld.param.u64 %rd1, [pb_rank_fill_ptr];
	ld.param.u64 %rd2, [pb_rank_fill_n];
	ld.param.u32 %r1, [pb_rank_fill_rank];
	cvta.to.global.u64 %rd1, %rd1;
	mul.lo.u32 %r9, %r1, 0x7F4A7C15;
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mul.wide.u32 %rd3, %r2, %r3;
	cvt.u64.u32 %rd4, %r4;
	add.u64 %rd3, %rd3, %rd4;
	mov.u32 %r5, %nctaid.x;
	mul.wide.u32 %rd5, %r5, %r3;
	setp.ge.u64 %p1, %rd3, %rd2;
	@%p1 bra RFILL_DONE;
RFILL_LOOP:
	cvt.u32.u64 %r6, %rd3;
	mul.lo.u32 %r6, %r6, 0x9E3779B1;
	add.u32 %r6, %r6, %r9;
	shr.u32 %r6, %r6, 20;
	sub.s32 %r6, %r6, 2048;
	shl.b64 %rd7, %rd3, 2;
	add.s64 %rd8, %rd1, %rd7;
	st.global.u32 [%rd8], %r6;
	add.u64 %rd3, %rd3, %rd5;
	setp.lt.u64 %p1, %rd3, %rd2;
	@%p1 bra RFILL_LOOP;
RFILL_DONE:
	ret;
}

// pb_sum_verify(ptr, n, nranks, result): result[0] (u64) counts the i where
// ptr[i] != sum over r < nranks of Value(r, i); result[1] is unused.
.visible .entry pb_sum_verify(
	.param .u64 pb_sum_verify_ptr,
	.param .u64 pb_sum_verify_n,
	.param .u32 pb_sum_verify_nranks,
	.param .u64 pb_sum_verify_result
)
{
	.reg .pred %p<3>;
	.reg .b32 %r<14>;
	.reg .b64 %rd<14>;

	ld.param.u64 %rd1, [pb_sum_verify_ptr];
	ld.param.u64 %rd2, [pb_sum_verify_n];
	ld.param.u32 %r1, [pb_sum_verify_nranks];
	ld.param.u64 %rd9, [pb_sum_verify_result];
	cvta.to.global.u64 %rd1, %rd1;
	cvta.to.global.u64 %rd9, %rd9;
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mul.wide.u32 %rd3, %r2, %r3;
	cvt.u64.u32 %rd4, %r4;
	add.u64 %rd3, %rd3, %rd4;
	mov.u32 %r5, %nctaid.x;
	mul.wide.u32 %rd5, %r5, %r3;
	setp.ge.u64 %p1, %rd3, %rd2;
	@%p1 bra SUMV_DONE;
SUMV_LOOP:
	cvt.u32.u64 %r6, %rd3;
	mul.lo.u32 %r6, %r6, 0x9E3779B1;
	mov.u32 %r7, 0;
	mov.u32 %r8, 0;
	mov.u32 %r9, 0;
SUMV_RANK:
	setp.ge.u32 %p2, %r8, %r1;
	@%p2 bra SUMV_CHECK;
	add.u32 %r10, %r6, %r9;
	shr.u32 %r10, %r10, 20;
	sub.s32 %r10, %r10, 2048;
	add.s32 %r7, %r7, %r10;
	add.u32 %r8, %r8, 1;
	add.u32 %r9, %r9, 0x7F4A7C15;
	bra SUMV_RANK;
SUMV_CHECK:
	shl.b64 %rd7, %rd3, 2;
	add.s64 %rd8, %rd1, %rd7;
	ld.global.u32 %r11, [%rd8];
	setp.eq.u32 %p2, %r11, %r7;
	@%p2 bra SUMV_NEXT;
	atom.global.add.u64 %rd11, [%rd9], 1;
SUMV_NEXT:
	add.u64 %rd3, %rd3, %rd5;
	setp.lt.u64 %p1, %rd3, %rd2;
	@%p1 bra SUMV_LOOP;
SUMV_DONE:
	ret;
}
`
