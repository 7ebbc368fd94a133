// d2d_ref: CUDA-C references for selftest/cuda's local figures, written from the
// methods (not from NVIDIA's samples), built with nvcc on the GPU host:
//
//   ce       the local device-to-device copy engine figure: 256 MiB buffers, a spin
//            kernel on a mapped host flag gates the stream, 4 warmup copies, start
//            event, 16 timed cudaMemcpyAsync, stop event, release the flag; 3 samples,
//            median; GB/s = bytes * loops / seconds / 1e9 (nvbandwidth's method).
//   sm       the same with a copy kernel of pb_copy_v4's shape (selftest/cuda/ptx.go):
//            16-byte vectors, grid-stride over all threads, four loads in flight per
//            thread per trip, grid = SMs x BLOCKS_PER_SM blocks of 512 threads.
//   latency  p2pBandwidthLatencyTest's method: behind the spin gate, start event, 100
//            cudaMemcpyAsync of 16 bytes, stop event; one sample = time / 100; 9
//            samples, median, in microseconds.
//
//   nvcc -O2 -o d2d_ref scripts/device/d2d_ref.cu -lcuda && ./d2d_ref [device]
//   ./d2d_ref sweep [device]   # SM copy over several unroll and grid shapes
//
// Output: one line per figure, the median last:
//   d2d_ref ce device 0 bytes 268435456 samples 2093.1 2092.8 2093.0 median 2093.0
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
	fprintf(stderr, "%s: %s\n", #x, cudaGetErrorName(e_)); exit(1); } } while (0)

// Must match selftest/cuda/module.go's CopySM: blocks per SM and threads per block.
static const int kBlocksPerSM = 2, kThreads = 512;

__global__ void spin(volatile int *flag, long long timeout) {
	long long t0 = clock64();
	while (*flag == 0 && clock64() - t0 < timeout) {
	}
}

// copy_v: U 16-byte loads per thread in flight, S = all threads apart, then the
// stores; the tail moves one vector per trip. U = 4 is pb_copy_v4's shape.
template <int U>
__global__ void copy_v(int4 *__restrict__ dst, const int4 *__restrict__ src, unsigned long long n) {
	unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
	unsigned long long s = (unsigned long long)gridDim.x * blockDim.x;
	for (; i + (U - 1) * s < n; i += U * s) {
		int4 v[U];
#pragma unroll
		for (int k = 0; k < U; k++)
			v[k] = src[i + k * s];
#pragma unroll
		for (int k = 0; k < U; k++)
			dst[i + k * s] = v[k];
	}
	for (; i < n; i += s)
		dst[i] = src[i];
}

__global__ void count_diff(const int *a, const int *b, unsigned long long n, unsigned long long *bad) {
	unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
	unsigned long long s = (unsigned long long)gridDim.x * blockDim.x;
	for (; i < n; i += s)
		if (a[i] != b[i])
			atomicAdd(bad, 1ull);
}

__global__ void fill(int *p, unsigned long long n, unsigned seed) {
	unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
	unsigned long long s = (unsigned long long)gridDim.x * blockDim.x;
	for (; i < n; i += s)
		p[i] = (int)(((unsigned)i ^ seed) * 0x9E3779B1u);
}

struct Gate {
	int *flag;
	cudaStream_t s;
	cudaEvent_t start, stop;
	long long timeout;
};

static double median(std::vector<double> v) {
	std::sort(v.begin(), v.end());
	size_t m = v.size() / 2;
	return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// timed runs op warmup times behind the gate, then loops times between the events,
// and returns the events' milliseconds.
template <typename F>
static float timed(Gate &g, int warmup, int loops, F op) {
	*(volatile int *)g.flag = 0;
	spin<<<1, 1, 0, g.s>>>(g.flag, g.timeout);
	CK(cudaGetLastError());
	for (int i = 0; i < warmup; i++)
		op();
	CK(cudaEventRecord(g.start, g.s));
	for (int i = 0; i < loops; i++)
		op();
	CK(cudaEventRecord(g.stop, g.s));
	*(volatile int *)g.flag = 1;
	CK(cudaEventSynchronize(g.stop));
	float ms = 0;
	CK(cudaEventElapsedTime(&ms, g.start, g.stop));
	return ms;
}

static void print(const char *what, int dev, const char *shape, const std::vector<double> &v) {
	printf("d2d_ref %s device %d %s samples", what, dev, shape);
	for (double x : v)
		printf(" %.3f", x);
	printf(" median %.3f\n", median(v));
}

template <int U>
static double sm_copy(Gate &g, int4 *dst, const int4 *src, size_t bytes, int blocks, int threads, int dev, bool show) {
	const int warmup = 4, loops = 16, samples = 3;
	unsigned long long n = bytes / 16;
	std::vector<double> v;
	for (int k = 0; k < samples; k++) {
		float ms = timed(g, warmup, loops, [&] { copy_v<U><<<blocks, threads, 0, g.s>>>(dst, src, n); });
		CK(cudaGetLastError());
		v.push_back((double)bytes * loops / (ms / 1e3) / 1e9);
	}
	unsigned long long *bad, nbad = 0;
	CK(cudaMalloc(&bad, 8));
	CK(cudaMemsetAsync(bad, 0, 8, g.s));
	count_diff<<<1024, 256, 0, g.s>>>((const int *)dst, (const int *)src, bytes / 4, bad);
	CK(cudaGetLastError());
	CK(cudaMemcpyAsync(&nbad, bad, 8, cudaMemcpyDeviceToHost, g.s));
	CK(cudaStreamSynchronize(g.s));
	CK(cudaFree(bad));
	if (nbad != 0) {
		fprintf(stderr, "sm copy unroll %d grid %d x %d: %llu words differ\n", U, blocks, threads, nbad);
		exit(1);
	}
	// The next shape must not pass on this one's output.
	fill<<<1024, 256, 0, g.s>>>((int *)dst, bytes / 4, 0xCAFEBABEu);
	CK(cudaStreamSynchronize(g.s));
	if (show) {
		char shape[96];
		snprintf(shape, sizeof shape, "bytes %zu unroll %d grid %d block %d verified", bytes, U, blocks, threads);
		print("sm", dev, shape, v);
	}
	return median(v);
}

int main(int argc, char **argv) {
	bool sweep = argc > 1 && strcmp(argv[1], "sweep") == 0;
	int dev = argc > 1 + sweep ? atoi(argv[1 + sweep]) : 0;
	const size_t bytes = 256ull << 20;
	CK(cudaSetDevice(dev));
	int khz = 0, sms = 0;
	CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
	void *src, *dst;
	CK(cudaMalloc(&src, bytes));
	CK(cudaMalloc(&dst, bytes));
	fill<<<1024, 256>>>((int *)src, bytes / 4, 0xBAADF00Du);
	fill<<<1024, 256>>>((int *)dst, bytes / 4, 0xCAFEBABEu);
	CK(cudaDeviceSynchronize());
	Gate g;
	CK(cudaHostAlloc(&g.flag, sizeof(int), cudaHostAllocPortable | cudaHostAllocMapped));
	CK(cudaStreamCreateWithFlags(&g.s, cudaStreamNonBlocking));
	CK(cudaEventCreate(&g.start));
	CK(cudaEventCreate(&g.stop));
	g.timeout = (long long)khz * 1000 * 10;

	if (sweep) {
		for (int threads : {256, 512, 1024})
			for (int per : {1, 2, 4, 8}) {
				int blocks = sms * per;
				if (threads * per > 2048)
					continue;
				double u1 = sm_copy<1>(g, (int4 *)dst, (const int4 *)src, bytes, blocks, threads, dev, false);
				double u2 = sm_copy<2>(g, (int4 *)dst, (const int4 *)src, bytes, blocks, threads, dev, false);
				double u4 = sm_copy<4>(g, (int4 *)dst, (const int4 *)src, bytes, blocks, threads, dev, false);
				double u8 = sm_copy<8>(g, (int4 *)dst, (const int4 *)src, bytes, blocks, threads, dev, false);
				printf("sweep block %4d blocks/SM %d: unroll1 %7.1f unroll2 %7.1f unroll4 %7.1f unroll8 %7.1f GB/s\n", threads, per, u1, u2, u4, u8);
			}
		return 0;
	}

	// 1. Copy engine.
	{
		std::vector<double> v;
		for (int k = 0; k < 3; k++) {
			float ms = timed(g, 4, 16, [&] { CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g.s)); });
			v.push_back((double)bytes * 16 / (ms / 1e3) / 1e9);
		}
		char shape[64];
		snprintf(shape, sizeof shape, "bytes %zu", bytes);
		print("ce", dev, shape, v);
	}
	// 2. SM copy of pb_copy_v4's shape.
	sm_copy<4>(g, (int4 *)dst, (const int4 *)src, bytes, sms * kBlocksPerSM, kThreads, dev, true);
	// 3. Latency of 16-byte local writes.
	{
		const int writes = 100, samples = 9;
		std::vector<double> v;
		for (int k = 0; k < samples; k++) {
			float ms = timed(g, 0, writes, [&] { CK(cudaMemcpyAsync(dst, src, 16, cudaMemcpyDeviceToDevice, g.s)); });
			v.push_back(ms * 1e3 / writes);
		}
		char shape[64];
		snprintf(shape, sizeof shape, "bytes 16 writes %d", writes);
		print("latency", dev, shape, v);
		// The same writes through cudaMemcpyPeerAsync (p2pBandwidthLatencyTest's call)
		// and through the driver API's cuMemcpyAsync (what selftest/cuda calls), to
		// tell the API's share of a difference from the method's.
		v.clear();
		for (int k = 0; k < samples; k++) {
			float ms = timed(g, 0, writes, [&] { CK(cudaMemcpyPeerAsync(dst, dev, src, dev, 16, g.s)); });
			v.push_back(ms * 1e3 / writes);
		}
		print("latency-peer-api", dev, shape, v);
		v.clear();
		for (int k = 0; k < samples; k++) {
			float ms = timed(g, 0, writes, [&] {
				if (cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, 16, (CUstream)g.s) != CUDA_SUCCESS) {
					fprintf(stderr, "cuMemcpyAsync failed\n");
					exit(1);
				}
			});
			v.push_back(ms * 1e3 / writes);
		}
		print("latency-driver-api", dev, shape, v);
	}
	return 0;
}
