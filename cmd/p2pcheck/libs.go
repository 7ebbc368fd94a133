package main

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/peerboot/peerboot/selftest"
)

// dlopenMode resolves every symbol at load (a libcuda with a missing dependency fails
// here, with dlerror's words, not later in the middle of a call) and exports them
// globally, as libcuda's own plugins (e.g. libnvidia-ptxjitcompiler) expect.
const dlopenMode = purego.RTLD_NOW | purego.RTLD_GLOBAL

// probeCUDA loads libcuda, calls cuInit(0) and cuDriverGetVersion. The version call
// needs no device, so it is made whatever cuInit said: it tells a version mismatch
// apart from a missing GPU.
func probeCUDA(lib string) selftest.CUDA {
	c := selftest.CUDA{Library: lib}
	h, err := purego.Dlopen(lib, dlopenMode)
	if err != nil {
		c.Error = fmt.Sprintf("dlopen: %v", err)
		return c
	}
	c.Loaded = true
	var cuInit func(flags uint32) int32
	if err := bind(h, "cuInit", &cuInit); err != nil {
		c.Error = err.Error()
		return c
	}
	st := cudaStatus(h, int(cuInit(0)))
	c.CuInit = &st
	var cuDriverGetVersion func(v *int32) int32
	if err := bind(h, "cuDriverGetVersion", &cuDriverGetVersion); err != nil {
		c.Error = err.Error()
		return c
	}
	var v int32
	if rc := cuDriverGetVersion(&v); rc != 0 {
		c.Error = fmt.Sprintf("cuDriverGetVersion: %s", cudaStatus(h, int(rc)).Name)
		return c
	}
	c.DriverVersion = int(v)
	return c
}

// cudaStatus names a CUresult by asking the library (cuGetErrorName works before
// cuInit), falling back to the built-in table for libraries without it.
func cudaStatus(h uintptr, code int) selftest.Status {
	var cuGetErrorName func(code int32, name **byte) int32
	if bind(h, "cuGetErrorName", &cuGetErrorName) == nil {
		var p *byte
		if cuGetErrorName(int32(code), &p) == 0 && p != nil {
			return selftest.Status{Name: goString(p), Code: code}
		}
	}
	return selftest.CUDAStatus(code)
}

// probeNVML loads libnvidia-ml, initializes it, asks the driver version and shuts it
// down again so the later phases start from a clean library.
func probeNVML(lib string) selftest.NVML {
	n := selftest.NVML{Library: lib}
	h, err := purego.Dlopen(lib, dlopenMode)
	if err != nil {
		n.Error = fmt.Sprintf("dlopen: %v", err)
		return n
	}
	n.Loaded = true
	var nvmlInit func() int32
	if err := bind(h, "nvmlInit_v2", &nvmlInit); err != nil {
		n.Error = err.Error()
		return n
	}
	st := selftest.NVMLStatus(int(nvmlInit()))
	n.Init = &st
	if st.Code != selftest.NVMLSuccess {
		return n
	}
	var getVersion func(buf *byte, length uint32) int32
	if err := bind(h, "nvmlSystemGetDriverVersion", &getVersion); err != nil {
		n.Error = err.Error()
	} else {
		// NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE is 80; leave room for future growth.
		buf := make([]byte, 96)
		if rc := getVersion(&buf[0], uint32(len(buf))); rc != 0 {
			n.Error = "nvmlSystemGetDriverVersion: " + selftest.NVMLStatus(int(rc)).Name
		} else {
			n.DriverVersion = goString(&buf[0])
		}
	}
	var shutdown func() int32
	if bind(h, "nvmlShutdown", &shutdown) == nil {
		shutdown()
	}
	return n
}

// bind looks a symbol up before registering it: purego.RegisterLibFunc panics on a
// missing symbol, and a library without one is a finding, not a crash.
func bind(h uintptr, name string, fn any) error {
	sym, err := purego.Dlsym(h, name)
	if err != nil {
		return fmt.Errorf("dlsym %s: %w", name, err)
	}
	purego.RegisterFunc(fn, sym)
	return nil
}

// goString copies a NUL-terminated C string, at most 4 KiB of it.
func goString(p *byte) string {
	var b []byte
	for i := 0; i < 4096; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}
