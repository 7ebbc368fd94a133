package nccl

import "testing"

// NCCL's result code says only "unhandled cuda error"; ncclGetLastError carries the
// CUDA failure the verdict's nccl.arch rule recognises.
func TestErrorCarriesTheLastWarning(t *testing.T) {
	l := &lib{
		getErrorString: func(int32) string { return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)" },
		getLastError: func(uintptr) string {
			return "Cuda failure 'no kernel image is available for execution on the device'\n"
		},
	}
	err := l.check(1, "ncclCommInitAll(%d)", 4)
	want := "ncclCommInitAll(4): unhandled cuda error (run with NCCL_DEBUG=INFO for details) (ncclResult 1): Cuda failure 'no kernel image is available for execution on the device'"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	l.getLastError = nil // NCCL before 2.13
	if err := l.check(1, "ncclCommInitAll(%d)", 4); err.Error() != "ncclCommInitAll(4): unhandled cuda error (run with NCCL_DEBUG=INFO for details) (ncclResult 1)" {
		t.Errorf("without ncclGetLastError: %v", err)
	}
	if l.check(0, "x") != nil {
		t.Error("ncclSuccess is an error")
	}
}
