package selftest

import "testing"

// The version codes the libraries return, as the console prints them: CUDA's
// 1000*major + 10*minor; NCCL's major*10000 + minor*100 + patch since 2.9 and
// major*1000 + minor*100 + patch before; nothing for an unknown (0) version.
func TestVersionCodes(t *testing.T) {
	for _, tc := range []struct {
		v    int
		want string
	}{
		{-1, ""}, {0, ""}, {1, "0.0"}, {12020, "12.2"}, {12040, "12.4"}, {11080, "11.8"}, {12010, "12.1"}, {13000, "13.0"},
	} {
		if got := cudaVersion(tc.v); got != tc.want {
			t.Errorf("cudaVersion(%d) = %q, want %q", tc.v, got, tc.want)
		}
	}
	for _, tc := range []struct {
		v    int
		want string
	}{
		{-5, ""}, {0, ""}, {1, "0.0.1"}, {2708, "2.7.8"}, {2804, "2.8.4"},
		{10000, "1.0.0"}, {21903, "2.19.3"}, {22803, "2.28.3"}, {30112, "3.1.12"},
	} {
		if got := ncclVersion(tc.v); got != tc.want {
			t.Errorf("ncclVersion(%d) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

// A recipe digest is shown to its first 12 hex digits; a short one whole.
func TestShortDigest(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"sha256:0123", "sha256:0123"},
		{"sha256:0123456789ab", "sha256:0123456789ab"},
		{"sha256:0123456789abc", "sha256:0123456789ab"},
		{"sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210", "sha256:fedcba987654"},
	} {
		if got := shortDigest(tc.in); got != tc.want {
			t.Errorf("shortDigest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// The errnos finit_module returns are named; others by number.
func TestErrnoName(t *testing.T) {
	for n, want := range map[int]string{1: "EPERM", 2: "ENOENT", 8: "ENOEXEC", 12: "ENOMEM", 14: "EFAULT", 16: "EBUSY",
		17: "EEXIST", 19: "ENODEV", 22: "EINVAL", 74: "EBADMSG", 110: "ETIMEDOUT", 129: "EKEYREJECTED", 0: "errno 0", 3: "errno 3", 999: "errno 999"} {
		if got := errnoName(n); got != want {
			t.Errorf("errnoName(%d) = %q, want %q", n, got, want)
		}
	}
}

// A library's line: not loaded and why; loaded, its init's status when called,
// and the driver version when known.
func TestLibLine(t *testing.T) {
	for _, tc := range []struct {
		lib     string
		loaded  bool
		err     string
		st      *Status
		version string
		want    string
	}{
		{"", false, "dlopen failed", nil, "12.4", "? not loaded: dlopen failed"},
		{"libcuda.so.1", true, "", nil, "", "libcuda.so.1 loaded"},
		{"libcuda.so.1", true, "", &Status{Name: "CUDA_ERROR_NO_DEVICE", Code: 100}, "", "libcuda.so.1 loaded, cuInit CUDA_ERROR_NO_DEVICE (100)"},
		{"libcuda.so.1", true, "", &Status{Name: "CUDA_SUCCESS"}, "12.4", "libcuda.so.1 loaded, cuInit CUDA_SUCCESS (0), driver 12.4"},
	} {
		if got := libLine(tc.lib, tc.loaded, tc.err, "cuInit", tc.st, tc.version); got != tc.want {
			t.Errorf("libLine(%q, %v, ...) = %q, want %q", tc.lib, tc.loaded, got, tc.want)
		}
	}
}
