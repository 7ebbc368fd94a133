package selftest

import "testing"

// Findings and notes name library return codes by their symbol (the verdict rules
// match on the number; a reader looks the name up). A code the tables lack keeps its
// number in a name that says which library's type it is.
func TestStatusNames(t *testing.T) {
	for _, tc := range []struct {
		got, want Status
	}{
		{CUDAStatus(CUDASuccess), Status{"CUDA_SUCCESS", 0}},
		{CUDAStatus(CUDAErrorStubLibrary), Status{"CUDA_ERROR_STUB_LIBRARY", 34}},
		{CUDAStatus(CUDAErrorNoDevice), Status{"CUDA_ERROR_NO_DEVICE", 100}},
		{CUDAStatus(CUDAErrorSystemMismatch), Status{"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", 803}},
		{CUDAStatus(719), Status{"CUresult(719)", 719}},
		{CUDAStatus(-1), Status{"CUresult(-1)", -1}},
		{NVMLStatus(NVMLSuccess), Status{"NVML_SUCCESS", 0}},
		{NVMLStatus(NVMLDriverNotLoaded), Status{"NVML_ERROR_DRIVER_NOT_LOADED", 9}},
		{NVMLStatus(NVMLLibRMVersionMismat), Status{"NVML_ERROR_LIB_RM_VERSION_MISMATCH", 18}},
		{NVMLStatus(999), Status{"NVML_ERROR_UNKNOWN", 999}},
		// 34 is a CUDA name, not an NVML one: each library has its own table.
		{NVMLStatus(34), Status{"nvmlReturn_t(34)", 34}},
		{CUDAStatus(21), Status{"CUresult(21)", 21}},
	} {
		if tc.got != tc.want {
			t.Errorf("got %+v, want %+v", tc.got, tc.want)
		}
	}
}
