// d2d_ref: CUDA-C reference for selftest/cuda's local device-to-device copy figure.
// Same method: 256 MiB buffers, a spin kernel on a mapped host flag gates the
// stream, 4 warmup copies, start event, 16 timed cudaMemcpyAsync, stop event, release
// the flag; 3 samples, median; GB/s = bytes * loops / seconds / 1e9.
//
//   nvcc -O2 -o d2d_ref scripts/device/d2d_ref.cu && ./d2d_ref [device]
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
	fprintf(stderr, "%s: %s\n", #x, cudaGetErrorName(e_)); exit(1); } } while (0)

__global__ void spin(volatile int *flag, long long timeout) {
	long long t0 = clock64();
	while (*flag == 0 && clock64() - t0 < timeout) {
	}
}

int main(int argc, char **argv) {
	const size_t bytes = 256ull << 20;
	const int warmup = 4, loops = 16, samples = 3;
	int dev = argc > 1 ? atoi(argv[1]) : 0;
	CK(cudaSetDevice(dev));
	int khz = 0;
	CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
	void *src, *dst;
	CK(cudaMalloc(&src, bytes));
	CK(cudaMalloc(&dst, bytes));
	CK(cudaMemset(src, 0x5a, bytes));
	CK(cudaMemset(dst, 0, bytes));
	int *flag;
	CK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocPortable | cudaHostAllocMapped));
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	cudaEvent_t start, stop;
	CK(cudaEventCreate(&start));
	CK(cudaEventCreate(&stop));
	double gbps[samples];
	for (int k = 0; k < samples; k++) {
		*(volatile int *)flag = 0;
		spin<<<1, 1, 0, s>>>(flag, (long long)khz * 1000 * 10);
		CK(cudaGetLastError());
		for (int i = 0; i < warmup; i++)
			CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
		CK(cudaEventRecord(start, s));
		for (int i = 0; i < loops; i++)
			CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
		CK(cudaEventRecord(stop, s));
		*(volatile int *)flag = 1;
		CK(cudaEventSynchronize(stop));
		float ms = 0;
		CK(cudaEventElapsedTime(&ms, start, stop));
		gbps[k] = (double)bytes * loops / (ms / 1e3) / 1e9;
	}
	double sorted[samples];
	std::copy(gbps, gbps + samples, sorted);
	std::sort(sorted, sorted + samples);
	printf("d2d_ref device %d bytes %zu warmup %d loops %d samples", dev, bytes, warmup, loops);
	for (int k = 0; k < samples; k++)
		printf(" %.1f", gbps[k]);
	printf(" median_gbps %.1f\n", sorted[samples / 2]);
	return 0;
}
