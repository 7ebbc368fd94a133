/*
 * FAKE libnvidia-ml FOR TESTS ONLY. Not NVIDIA code and not a driver: a few exported
 * functions with NVML's real symbol names, C signatures and struct layouts, so that
 * package nvml's purego bindings can be tested on machines without an NVIDIA GPU. The
 * tests build it with `gcc -shared -fPIC` and pass the .so to nvml.Probe.
 *
 * It simulates four RTX 4090 48G cards on an EPYC-like box:
 *
 *   index  bus id              link now/max   replay counter
 *   0      00000000:01:00.0    Gen1 x16 / Gen4 x16   0
 *   1      00000000:21:00.0    Gen4 x16 / Gen4 x16   3
 *   2      00000000:41:00.0    Gen4 x8  / Gen4 x16   0
 *   3      00000000:C1:00.0    Gen4 x16 / Gen4 x16   NOT_SUPPORTED
 *
 * Topology levels (symmetric): 0-1 SINGLE(10), 2-3 MULTIPLE(20), 0-2 and 1-2
 * HOSTBRIDGE(30), 0-3 NODE(40), 1-3 SYSTEM(50).
 *
 * Compile-time switches (-D):
 *   FAKE_P2P=n        every READ and WRITE P2P status is n (default 0, OK). With 0, the
 *                     WRITE status of pair 2-3 is 3 (TOPOLOGY_NOT_SUPPORTED), so a test
 *                     sees whether READ and WRITE were asked with the right index.
 *   FAKE_INIT_RC=n    nvmlInit_v2 returns n (default 0).
 *   FAKE_INIT_HANG    nvmlInit_v2 never returns (a wedged driver).
 *   FAKE_NO_INIT      leave nvmlInit_v2 out.
 *   FAKE_NO_REPLAY    leave nvmlDeviceGetPcieReplayCounter out (an old driver).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifndef FAKE_P2P
#define FAKE_P2P 0
#endif
#ifndef FAKE_INIT_RC
#define FAKE_INIT_RC 0
#endif

enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_NOT_FOUND = 6,
};

/* nvmlPciInfo_t, as nvmlDeviceGetPciInfo_v3 fills it. */
typedef struct {
	char busIdLegacy[16];
	unsigned int domain;
	unsigned int bus;
	unsigned int device;
	unsigned int pciDeviceId;
	unsigned int pciSubSystemId;
	char busId[32];
} nvmlPciInfo_t;

typedef struct {
	unsigned long long total, free, used;
} nvmlMemory_t; /* also nvmlBAR1Memory_t: bar1Total, bar1Free, bar1Used */

typedef struct fake_dev {
	unsigned int bus;
	unsigned int curr_gen, curr_width, max_gen, max_width;
	int replay; /* -1: NOT_SUPPORTED */
} *nvmlDevice_t;

static struct fake_dev devs[4] = {
	{0x01, 1, 16, 4, 16, 0},
	{0x21, 4, 16, 4, 16, 3},
	{0x41, 4, 8, 4, 16, 0},
	{0xC1, 4, 16, 4, 16, -1},
};

static int topo[4][4] = {
	{0, 10, 30, 40},
	{10, 0, 30, 50},
	{30, 30, 0, 20},
	{40, 50, 20, 0},
};

static int initialized;

static int idx(nvmlDevice_t d) {
	for (int i = 0; i < 4; i++)
		if (d == &devs[i])
			return i;
	return -1;
}

#ifndef FAKE_NO_INIT
int nvmlInit_v2(void) {
#ifdef FAKE_INIT_HANG
	for (;;)
		pause();
#endif
	if (FAKE_INIT_RC == 0)
		initialized++;
	return FAKE_INIT_RC;
}
#endif

int nvmlShutdown(void) {
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	initialized--;
	return NVML_SUCCESS;
}

int nvmlSystemGetDriverVersion(char *buf, unsigned int len) {
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!buf || len < 80)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	snprintf(buf, len, "595.71.05");
	return NVML_SUCCESS;
}

int nvmlSystemGetCudaDriverVersion_v2(int *v) {
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	*v = 13010;
	return NVML_SUCCESS;
}

int nvmlDeviceGetCount_v2(unsigned int *n) {
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	*n = 4;
	return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) {
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (i >= 4 || !d)
		return NVML_ERROR_INVALID_ARGUMENT;
	*d = &devs[i];
	return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByPciBusId_v2(const char *busId, nvmlDevice_t *d) {
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	for (int i = 0; i < 4; i++) {
		char want[32];
		snprintf(want, sizeof want, "00000000:%02X:00.0", devs[i].bus);
		if (strcmp(busId, want) == 0) {
			*d = &devs[i];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

int nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) {
	int i = idx(d);
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (i < 0 || !p)
		return NVML_ERROR_INVALID_ARGUMENT;
	memset(p, 0, sizeof *p);
	snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "0000:%02X:00.0", d->bus);
	p->domain = 0;
	p->bus = d->bus;
	p->device = 0;
	p->pciDeviceId = 0x268410de; /* AD102, RTX 4090 */
	p->pciSubSystemId = 0x167c10de;
	snprintf(p->busId, sizeof p->busId, "00000000:%02X:00.0", d->bus);
	return NVML_SUCCESS;
}

int nvmlDeviceGetName(nvmlDevice_t d, char *buf, unsigned int len) {
	if (idx(d) < 0 || !buf)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (len < 96)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	snprintf(buf, len, "NVIDIA GeForce RTX 4090");
	return NVML_SUCCESS;
}

int nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
	if (idx(d) < 0 || !m)
		return NVML_ERROR_INVALID_ARGUMENT;
	m->total = 32ULL << 30;           /* 32 GiB BAR1 */
	m->used = (8ULL << 20) * (idx(d) + 1); /* differs per GPU */
	m->free = m->total - m->used;
	return NVML_SUCCESS;
}

int nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
	if (idx(d) < 0 || !m)
		return NVML_ERROR_INVALID_ARGUMENT;
	m->total = 49140ULL << 20; /* the 48G mod's 49140 MiB */
	m->used = 431ULL << 20;
	m->free = m->total - m->used;
	return NVML_SUCCESS;
}

#define LINK_FN(fn, field)                                                                 \
	int fn(nvmlDevice_t d, unsigned int *v) {                                            \
		if (idx(d) < 0 || !v)                                                        \
			return NVML_ERROR_INVALID_ARGUMENT;                                  \
		*v = d->field;                                                               \
		return NVML_SUCCESS;                                                         \
	}
LINK_FN(nvmlDeviceGetCurrPcieLinkGeneration, curr_gen)
LINK_FN(nvmlDeviceGetCurrPcieLinkWidth, curr_width)
LINK_FN(nvmlDeviceGetMaxPcieLinkGeneration, max_gen)
LINK_FN(nvmlDeviceGetMaxPcieLinkWidth, max_width)

/* nvmlEnableState_t: GPU 0 drives the console (display mode and display active 1), as
 * a box's first card often does; the others are headless. */
int nvmlDeviceGetDisplayMode(nvmlDevice_t d, int *v) {
	if (idx(d) < 0 || !v)
		return NVML_ERROR_INVALID_ARGUMENT;
	*v = idx(d) == 0;
	return NVML_SUCCESS;
}

int nvmlDeviceGetDisplayActive(nvmlDevice_t d, int *v) {
	if (idx(d) < 0 || !v)
		return NVML_ERROR_INVALID_ARGUMENT;
	*v = idx(d) == 0;
	return NVML_SUCCESS;
}

#ifndef FAKE_NO_REPLAY
int nvmlDeviceGetPcieReplayCounter(nvmlDevice_t d, unsigned int *v) {
	if (idx(d) < 0 || !v)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (d->replay < 0)
		return NVML_ERROR_NOT_SUPPORTED;
	*v = (unsigned int)d->replay;
	return NVML_SUCCESS;
}
#endif

/* caps: 0 READ, 1 WRITE, 2 NVLINK, 3 ATOMICS, 4 PCI/PROP. */
int nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b, int caps, int *status) {
	int i = idx(a), j = idx(b);
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (i < 0 || j < 0 || i == j || !status)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (caps != 0 && caps != 1)
		return NVML_ERROR_INVALID_ARGUMENT;
	*status = FAKE_P2P;
	if (FAKE_P2P == 0 && caps == 1 && ((i == 2 && j == 3) || (i == 3 && j == 2)))
		*status = 3;
	return NVML_SUCCESS;
}

int nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b, int *level) {
	int i = idx(a), j = idx(b);
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (i < 0 || j < 0 || !level)
		return NVML_ERROR_INVALID_ARGUMENT;
	*level = topo[i][j];
	return NVML_SUCCESS;
}
