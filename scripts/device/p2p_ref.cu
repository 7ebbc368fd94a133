// p2p_ref: CUDA-C reference for p2pcheck's copy-engine peer-copy matrix, measured the
// way selftest/cuda measures it (nvbandwidth's method), so the two can be compared
// pair by pair on a multi-GPU host:
//   - buffers of 256 MiB on every GPU; peer access enabled both ways per pair;
//   - "write": issued on the source GPU's stream, cudaMemcpyAsync(dst on peer, src);
//     "bidir": both directions at once on two streams, the sum reported;
//   - a spin kernel on a mapped host flag holds the stream while 4 warm-up copies and
//     the start event are queued; 16 timed copies; stop event; release the flag;
//   - 3 samples, median; GB/s = bytes * 16 / seconds / 1e9.
// Latency (p2pBandwidthLatencyTest's method): 100 copies of 16 bytes behind the same
// gate, time / 100, median of 9 samples, locally and per ordered pair.
// Output, one line per measurement: "ce write SRC->DST GBPS" / "ce bidir A<->B GBPS" /
// "latency write SRC->DST US" / "latency local D->D US".
//
//   nvcc -O2 -o p2p_ref scripts/device/p2p_ref.cu && ./p2p_ref
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
	fprintf(stderr, "%s: %s\n", #x, cudaGetErrorName(e_)); exit(1); } } while (0)

static const size_t kBytes = 256ull << 20;
static const int kWarmup = 4, kLoops = 16, kSamples = 3;

__global__ void spin(volatile int *flag, long long timeout) {
	long long t0 = clock64();
	while (*flag == 0 && clock64() - t0 < timeout) {
	}
}

static long long spinTimeout(int dev) {
	int khz = 0;
	CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
	return (long long)khz * 1000 * 10; // 10 s
}

// measure runs one sample: copies on stream s0 (device d0) and, for bidir, on s1
// (device d1) at the same time; returns GB/s summed over the directions.
static double sample(int d0, cudaStream_t s0, void *dst0, const void *src0,
                     int d1, cudaStream_t s1, void *dst1, const void *src1, int *flag) {
	int *dflag;
	CK(cudaHostGetDevicePointer((void **)&dflag, flag, 0));
	*(volatile int *)flag = 0;
	cudaEvent_t start, stop, start1, stop1;
	CK(cudaSetDevice(d0));
	CK(cudaEventCreate(&start));
	CK(cudaEventCreate(&stop));
	spin<<<1, 1, 0, s0>>>(dflag, spinTimeout(d0));
	for (int i = 0; i < kWarmup; i++) CK(cudaMemcpyAsync(dst0, src0, kBytes, cudaMemcpyDefault, s0));
	CK(cudaEventRecord(start, s0));
	if (s1) {
		CK(cudaSetDevice(d1));
		CK(cudaEventCreate(&start1));
		CK(cudaEventCreate(&stop1));
		CK(cudaStreamWaitEvent(s1, start, 0));
		for (int i = 0; i < kLoops; i++) CK(cudaMemcpyAsync(dst1, src1, kBytes, cudaMemcpyDefault, s1));
		CK(cudaEventRecord(stop1, s1));
		CK(cudaSetDevice(d0));
	}
	for (int i = 0; i < kLoops; i++) CK(cudaMemcpyAsync(dst0, src0, kBytes, cudaMemcpyDefault, s0));
	if (s1) CK(cudaStreamWaitEvent(s0, stop1, 0));
	CK(cudaEventRecord(stop, s0));
	*(volatile int *)flag = 1;
	CK(cudaEventSynchronize(stop));
	float ms = 0;
	CK(cudaEventElapsedTime(&ms, start, stop));
	double dirs = s1 ? 2.0 : 1.0;
	return dirs * (double)kBytes * kLoops / (ms / 1e3) / 1e9;
}

static double median(std::vector<double> v) {
	std::sort(v.begin(), v.end());
	return v[v.size() / 2];
}

// latency is p2pBandwidthLatencyTest's figure for one ordered pair (or one GPU): behind
// the spin gate on d's stream, start event, 100 copies of 16 bytes, stop event; one
// sample = time / 100 in microseconds; the median of 9 samples.
static double latency(int d, cudaStream_t s, void *dst, const void *src, int *flag) {
	const int writes = 100, samples = 9;
	int *dflag;
	CK(cudaHostGetDevicePointer((void **)&dflag, flag, 0));
	CK(cudaSetDevice(d));
	cudaEvent_t start, stop;
	CK(cudaEventCreate(&start));
	CK(cudaEventCreate(&stop));
	std::vector<double> v;
	for (int k = 0; k < samples; k++) {
		*(volatile int *)flag = 0;
		spin<<<1, 1, 0, s>>>(dflag, spinTimeout(d));
		CK(cudaGetLastError());
		CK(cudaEventRecord(start, s));
		for (int i = 0; i < writes; i++) CK(cudaMemcpyAsync(dst, src, 16, cudaMemcpyDefault, s));
		CK(cudaEventRecord(stop, s));
		*(volatile int *)flag = 1;
		CK(cudaEventSynchronize(stop));
		float ms = 0;
		CK(cudaEventElapsedTime(&ms, start, stop));
		v.push_back(ms * 1e3 / writes);
	}
	CK(cudaEventDestroy(start));
	CK(cudaEventDestroy(stop));
	return median(v);
}

int main() {
	int n = 0;
	CK(cudaGetDeviceCount(&n));
	int *flag;
	CK(cudaHostAlloc((void **)&flag, sizeof(int), cudaHostAllocPortable | cudaHostAllocMapped));
	std::vector<void *> a(n), b(n);
	std::vector<cudaStream_t> s(n), t(n);
	for (int d = 0; d < n; d++) {
		CK(cudaSetDevice(d));
		CK(cudaMalloc(&a[d], kBytes));
		CK(cudaMalloc(&b[d], kBytes));
		CK(cudaMemset(a[d], d + 1, kBytes));
		CK(cudaStreamCreateWithFlags(&s[d], cudaStreamNonBlocking));
		CK(cudaStreamCreateWithFlags(&t[d], cudaStreamNonBlocking));
	}
	for (int d = 0; d < n; d++) {
		std::vector<double> v;
		for (int k = 0; k < kSamples; k++) v.push_back(sample(d, s[d], b[d], a[d], 0, 0, 0, 0, flag));
		printf("ce local %d->%d %.1f\n", d, d, median(v));
		printf("latency local %d->%d %.3f\n", d, d, latency(d, s[d], b[d], a[d], flag));
	}
	for (int i = 0; i < n; i++) {
		for (int j = 0; j < n; j++) {
			if (i == j) continue;
			int ok = 0;
			CK(cudaDeviceCanAccessPeer(&ok, i, j));
			if (!ok) { printf("ce write %d->%d n/a\n", i, j); continue; }
			CK(cudaSetDevice(i));
			cudaError_t e = cudaDeviceEnablePeerAccess(j, 0);
			if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CK(e);
			CK(cudaSetDevice(j));
			e = cudaDeviceEnablePeerAccess(i, 0);
			if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CK(e);
			cudaGetLastError();
			std::vector<double> v;
			for (int k = 0; k < kSamples; k++) v.push_back(sample(i, s[i], b[j], a[i], 0, 0, 0, 0, flag));
			printf("ce write %d->%d %.1f\n", i, j, median(v));
			printf("latency write %d->%d %.3f\n", i, j, latency(i, s[i], b[j], a[i], flag));
			if (i < j) {
				std::vector<double> w;
				for (int k = 0; k < kSamples; k++) w.push_back(sample(i, s[i], b[j], a[i], j, t[j], b[i], a[j], flag));
				printf("ce bidir %d<->%d %.1f\n", i, j, median(w));
			}
		}
	}
	return 0;
}
