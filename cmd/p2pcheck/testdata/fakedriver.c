/*
 * FAKE libcuda + libnvidia-ml FOR CI ONLY. Not NVIDIA code, not a driver: a few exported
 * symbols with the real names and C signatures, so p2pcheck's dlopen path can be tested
 * on machines without an NVIDIA driver. The tests build it with `gcc -shared` and pass
 * it as --cuda-lib and --nvml-lib.
 *
 * It answers like a real 535 driver on a GPU-less VM: cuInit -> CUDA_ERROR_NO_DEVICE
 * (100), cuDriverGetVersion -> 12020, nvmlInit_v2 -> NVML_ERROR_DRIVER_NOT_LOADED (9).
 * FAKE_CUDA_HANG=1 makes cuInit never return, to test the phase deadline.
 * FAKE_CUDA_INIT=<n> makes cuInit return n.
 */
#include <stdlib.h>
#include <unistd.h>

int cuInit(unsigned int flags) {
	(void)flags;
	if (getenv("FAKE_CUDA_HANG")) {
		for (;;)
			pause();
	}
	const char *rc = getenv("FAKE_CUDA_INIT");
	return rc ? atoi(rc) : 100;
}

int cuDriverGetVersion(int *v) {
	if (!v)
		return 1; /* CUDA_ERROR_INVALID_VALUE */
	*v = 12020;
	return 0;
}

/* No cuGetErrorName on purpose: p2pcheck must fall back to its own table. */

int nvmlInit_v2(void) { return 9; }
int nvmlShutdown(void) { return 0; }
int nvmlSystemGetDriverVersion(char *buf, unsigned int len) {
	(void)buf;
	(void)len;
	return 1; /* NVML_ERROR_UNINITIALIZED: init never succeeds here */
}
