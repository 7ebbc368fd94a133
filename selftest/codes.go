package selftest

import "fmt"

// cudaNames are the CUresult values a boot is likely to see. p2pcheck prefers the
// library's own cuGetErrorName; this table names codes when that symbol is missing.
var cudaNames = map[int]string{
	0:   "CUDA_SUCCESS",
	1:   "CUDA_ERROR_INVALID_VALUE",
	2:   "CUDA_ERROR_OUT_OF_MEMORY",
	3:   "CUDA_ERROR_NOT_INITIALIZED",
	4:   "CUDA_ERROR_DEINITIALIZED",
	34:  "CUDA_ERROR_STUB_LIBRARY",
	46:  "CUDA_ERROR_DEVICE_UNAVAILABLE",
	100: "CUDA_ERROR_NO_DEVICE",
	101: "CUDA_ERROR_INVALID_DEVICE",
	102: "CUDA_ERROR_DEVICE_NOT_LICENSED",
	304: "CUDA_ERROR_OPERATING_SYSTEM",
	801: "CUDA_ERROR_NOT_SUPPORTED",
	802: "CUDA_ERROR_SYSTEM_NOT_READY",
	803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
	999: "CUDA_ERROR_UNKNOWN",
}

// nvmlNames are nvmlReturn_t values; NVML has no name function, only prose.
var nvmlNames = map[int]string{
	0:   "NVML_SUCCESS",
	1:   "NVML_ERROR_UNINITIALIZED",
	2:   "NVML_ERROR_INVALID_ARGUMENT",
	3:   "NVML_ERROR_NOT_SUPPORTED",
	4:   "NVML_ERROR_NO_PERMISSION",
	5:   "NVML_ERROR_ALREADY_INITIALIZED",
	6:   "NVML_ERROR_NOT_FOUND",
	7:   "NVML_ERROR_INSUFFICIENT_SIZE",
	8:   "NVML_ERROR_INSUFFICIENT_POWER",
	9:   "NVML_ERROR_DRIVER_NOT_LOADED",
	10:  "NVML_ERROR_TIMEOUT",
	11:  "NVML_ERROR_IRQ_ISSUE",
	12:  "NVML_ERROR_LIBRARY_NOT_FOUND",
	13:  "NVML_ERROR_FUNCTION_NOT_FOUND",
	14:  "NVML_ERROR_CORRUPTED_INFOROM",
	15:  "NVML_ERROR_GPU_IS_LOST",
	16:  "NVML_ERROR_RESET_REQUIRED",
	17:  "NVML_ERROR_OPERATING_SYSTEM",
	18:  "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
	19:  "NVML_ERROR_IN_USE",
	20:  "NVML_ERROR_MEMORY",
	21:  "NVML_ERROR_NO_DATA",
	999: "NVML_ERROR_UNKNOWN",
}

// CUDAStatus names a CUresult.
func CUDAStatus(code int) Status {
	if n, ok := cudaNames[code]; ok {
		return Status{Name: n, Code: code}
	}
	return Status{Name: fmt.Sprintf("CUresult(%d)", code), Code: code}
}

// NVMLStatus names an nvmlReturn_t.
func NVMLStatus(code int) Status {
	if n, ok := nvmlNames[code]; ok {
		return Status{Name: n, Code: code}
	}
	return Status{Name: fmt.Sprintf("nvmlReturn_t(%d)", code), Code: code}
}

// Library return codes the verdict rules name.
const (
	CUDASuccess             = 0
	CUDAErrorStubLibrary    = 34
	CUDAErrorNoDevice       = 100
	CUDAErrorSystemMismatch = 803

	NVMLSuccess            = 0
	NVMLDriverNotLoaded    = 9
	NVMLLibRMVersionMismat = 18
)
