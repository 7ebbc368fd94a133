package verdict

import (
	"testing"

	"github.com/peerboot/peerboot/selftest"
)

// ncclGetVersion's code in both encodings, at each encoding's edge.
func TestNCCLVersionString(t *testing.T) {
	for code, want := range map[int]string{
		22907: "2.29.7",
		20900: "2.9.0", // the first of the new encoding
		21805: "2.18.5",
		2708:  "2.7.8",
		1000:  "1.0.0",
		999:   "999",
		1:     "1",
		0:     "",
		-1:    "",
	} {
		if got := ncclVersionString(code); got != want {
			t.Errorf("ncclVersionString(%d) = %q, want %q", code, got, want)
		}
	}
}

// nccl.arch names each GPU arch once, skips a device whose compute capability
// is unknown, says "this box's GPUs" when none is known, and names NCCL's
// version, file and the driver only when the report has them.
func TestNCCLArchMessage(t *testing.T) {
	const fail = "ncclCommInitAll(2): unhandled cuda error (ncclResult 1): Cuda failure 'no kernel image is available for execution on the device'"
	for _, c := range []struct {
		name string
		set  func(r *selftest.Report)
		want string
	}{
		{"two GPUs of one arch, one unknown", func(r *selftest.Report) {
			r.CUDA.Devices = []selftest.CUDADevice{{Name: "NVIDIA GeForce RTX 5090", CC: "12.0"}, {Name: "NVIDIA GeForce RTX 5090", CC: "12.0"}, {Name: "NVIDIA H200", CC: ""}}
			r.NCCL.Version, r.NCCL.LibraryFile = 22203, "/usr/lib/x86_64-linux-gnu/libnccl.so.2.22.3"
		}, `NCCL 2.22.3 (/usr/lib/x86_64-linux-gnu/libnccl.so.2.22.3) has no kernels that run on RTX 5090 (sm_120), driver 550.163.01: its all-reduce failed with "no kernel image is available"`},
		{"two archs", func(r *selftest.Report) {
			r.CUDA.Devices = []selftest.CUDADevice{{Name: "NVIDIA GeForce RTX 5090", CC: "12.0"}, {Name: "NVIDIA H200", CC: "9.0"}}
			r.NCCL.Version, r.NCCL.LibraryFile = 0, ""
		}, `NCCL has no kernels that run on RTX 5090 (sm_120), H200 (sm_90), driver 550.163.01: its all-reduce failed with "no kernel image is available"`},
		{"nothing known", func(r *selftest.Report) {
			r.CUDA.Devices = nil
			r.NCCL.Version, r.NCCL.LibraryFile, r.NVML.DriverVersion = 0, "", ""
		}, `NCCL has no kernels that run on this box's GPUs: its all-reduce failed with "no kernel image is available"`},
	} {
		r := healthyReport(2)
		r.NCCL.Error = fail
		c.set(r)
		j := &judge{r: r}
		if !j.ncclArch(r.NCCL) {
			t.Fatalf("%s: %q not taken for an arch failure", c.name, fail)
		}
		if len(j.fs) != 1 || j.fs[0].Message != c.want {
			t.Errorf("%s: findings %+v\nwant the message %q", c.name, j.fs, c.want)
		}
	}
	r := healthyReport(2)
	r.NCCL.Error = "ncclCommInitAll: unhandled system error (2)"
	if j := (&judge{r: r}); j.ncclArch(r.NCCL) || len(j.fs) != 0 {
		t.Errorf("another NCCL error taken for an arch failure: %+v", j.fs)
	}
}
