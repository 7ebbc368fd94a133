// peermem_ref.cu: the CUDA-C reference of p2pcheck's peermem phase
// (selftest/cuda/peermem.go), built with nvcc on the device host. On GPU owner it
// checks, like p2pcheck: managed memory (cuMemAllocManaged, cuMemAdvise
// SET_PREFERRED_LOCATION owner and SET_ACCESSED_BY peer), a cuMemCreate/cuMemMap
// mapping with cuMemSetAccess for owner and peer, and the same exported as a POSIX
// fd and imported again; each: owner's kernel writes, peer's kernel checks and writes,
// owner's kernel checks, peer's copy engine copies out and the copy is checked. It
// prints one line per form, "ref <form> <owner>-><peer> ok|FAIL <detail>", and the
// time of each check; exit 1 on any FAIL. With one GPU owner = peer = 0.
//
//   nvcc -O2 -o /tmp/peermem_ref scripts/device/peermem_ref.cu -lcuda && /tmp/peermem_ref [bytes]
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <time.h>

#define CK(x) do { CUresult rc_ = (x); if (rc_ != CUDA_SUCCESS) { const char *n_; cuGetErrorName(rc_, &n_); \
	printf("  %s: %s (%d)\n", #x, n_, (int)rc_); return 1; } } while (0)

// The same pattern as selftest/cuda's pb_fill / pb_verify.
__device__ __host__ unsigned pattern(unsigned long long i, unsigned seed) {
	unsigned h = ((unsigned)i ^ seed) * 0x9E3779B1u;
	h += (unsigned)(i >> 32);
	return h ^ (h >> 16);
}
__global__ void fill(unsigned *p, unsigned long long n, unsigned seed) {
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += (unsigned long long)gridDim.x * blockDim.x)
		p[i] = pattern(i, seed);
}
__global__ void verify(const unsigned *p, unsigned long long n, unsigned seed, unsigned long long *bad) {
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += (unsigned long long)gridDim.x * blockDim.x)
		if (p[i] != pattern(i, seed)) atomicAdd(bad, 1ULL);
}

static CUcontext ctx[8];
static CUdevice dev[8];

static int wrong(int g, CUdeviceptr p, unsigned long long n, unsigned seed, unsigned long long *out) {
	CK(cuCtxSetCurrent(ctx[g]));
	unsigned long long *bad;
	CK(cuMemAlloc((CUdeviceptr *)&bad, 8));
	CK(cuMemsetD32((CUdeviceptr)bad, 0, 2));
	verify<<<264, 256>>>((const unsigned *)p, n, seed, bad);
	CK(cuCtxSynchronize());
	CK(cuMemcpyDtoH(out, (CUdeviceptr)bad, 8));
	CK(cuMemFree((CUdeviceptr)bad));
	return 0;
}

// exercise: the four data steps; returns 0 and sets *w to the wrong words in total.
static int exercise(int o, int pe, CUdeviceptr p, size_t bytes, unsigned long long *w) {
	unsigned long long n = bytes / 4, a = 0, b = 0, c = 0;
	CK(cuCtxSetCurrent(ctx[o]));
	fill<<<264, 256>>>((unsigned *)p, n, 0x0A11CE55u);
	CK(cuCtxSynchronize());
	if (wrong(pe, p, n, 0x0A11CE55u, &a)) return 1;
	CK(cuCtxSetCurrent(ctx[pe]));
	fill<<<264, 256>>>((unsigned *)p, n, 0x9EE2B0B5u);
	CK(cuCtxSynchronize());
	if (wrong(o, p, n, 0x9EE2B0B5u, &b)) return 1;
	CK(cuCtxSetCurrent(ctx[pe]));
	CUdeviceptr dst;
	CK(cuMemAlloc(&dst, bytes));
	CK(cuMemcpy(dst, p, bytes));
	if (wrong(pe, dst, n, 0x9EE2B0B5u, &c)) return 1;
	CK(cuCtxSetCurrent(ctx[pe]));
	CK(cuMemFree(dst));
	*w = a + b + c;
	return 0;
}

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

static int managed(int o, int pe, size_t bytes, unsigned long long *w) {
	CK(cuCtxSetCurrent(ctx[o]));
	CUdeviceptr p;
	CK(cuMemAllocManaged(&p, bytes, CU_MEM_ATTACH_GLOBAL));
#if CUDA_VERSION >= 13000
	// CUDA 13's cuMemAdvise takes a CUmemLocation (the symbol cuMemAdvise_v2).
	CUmemLocation lo = {CU_MEM_LOCATION_TYPE_DEVICE, dev[o]}, lp = {CU_MEM_LOCATION_TYPE_DEVICE, dev[pe]};
#else
	CUdevice lo = dev[o], lp = dev[pe];
#endif
	CK(cuMemAdvise(p, bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, lo));
	CK(cuMemAdvise(p, bytes, CU_MEM_ADVISE_SET_ACCESSED_BY, lo));
	CK(cuMemAdvise(p, bytes, CU_MEM_ADVISE_SET_ACCESSED_BY, lp));
	if (exercise(o, pe, p, bytes, w)) return 1;
	CK(cuMemFree(p));
	return 0;
}

static int vmm(int o, int pe, size_t bytes, int exported, unsigned long long *w) {
	CK(cuCtxSetCurrent(ctx[o]));
	CUmemAllocationProp prop = {};
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = dev[o];
	prop.requestedHandleTypes = exported ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
	size_t gran;
	CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	size_t size = (bytes + gran - 1) / gran * gran;
	CUmemGenericAllocationHandle h, m;
	CK(cuMemCreate(&h, size, &prop, 0));
	m = h;
	if (exported) {
		int fd;
		CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
		CK(cuMemImportFromShareableHandle(&m, (void *)(long)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
		close(fd);
	}
	CUdeviceptr va;
	CK(cuMemAddressReserve(&va, size, 0, 0, 0));
	CK(cuMemMap(va, size, 0, m, 0));
	CUmemAccessDesc d[2] = {{{CU_MEM_LOCATION_TYPE_DEVICE, dev[o]}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE},
				{{CU_MEM_LOCATION_TYPE_DEVICE, dev[pe]}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE}};
	CK(cuMemSetAccess(va, size, d, o == pe ? 1 : 2));
	if (exercise(o, pe, va, size, w)) return 1;
	CK(cuMemUnmap(va, size));
	CK(cuMemAddressFree(va, size));
	if (exported) CK(cuMemRelease(m));
	CK(cuMemRelease(h));
	return 0;
}

int main(int argc, char **argv) {
	size_t bytes = argc > 1 ? strtoull(argv[1], 0, 0) : (32u << 20);
	int n, fails = 0;
	CK(cuInit(0));
	CK(cuDeviceGetCount(&n));
	for (int i = 0; i < n && i < 8; i++) {
		CK(cuDeviceGet(&dev[i], i));
		CK(cuDevicePrimaryCtxRetain(&ctx[i], dev[i]));
	}
	int o = 0, pe = n > 1 ? 1 : 0;
	const char *forms[] = {"managed", "vmm", "ipc"};
	for (int f = 0; f < 3; f++) {
		unsigned long long w = 0;
		double t0 = now();
		int err = f == 0 ? managed(o, pe, bytes, &w) : vmm(o, pe, bytes, f == 2, &w);
		double ms = (now() - t0) * 1e3;
		int ok = !err && w == 0;
		fails += !ok;
		printf("ref %s %d->%d %s wrong=%llu %.1f ms\n", forms[f], o, pe, ok ? "ok" : "FAIL", w, ms);
	}
	return fails ? 1 : 0;
}
