package selftest

import (
	"fmt"
	"strings"
)

// Summary renders the few lines a person at the console reads before the report line:
// the verdict first, then what the kernel, the modules and the libraries said, then
// what failed and what to do about it. Info findings are counted, not listed; they are
// in the JSON.
func Summary(r *Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "peerboot self-test: %s", strings.ToUpper(orDefault(r.Verdict, "unknown")))
	if r.Recipe.Name != "" {
		fmt.Fprintf(&b, "  recipe %s %s", r.Recipe.Name, shortDigest(r.Recipe.Digest))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  kernel   %s\n", orDefault(r.Kernel.Release, "?"))
	if len(r.Modules) == 0 {
		b.WriteString("  modules  none attempted\n")
	} else {
		var parts []string
		for _, m := range r.Modules {
			if m.RequiredBy != "" {
				continue // dependencies are in the JSON; the line names the recipe's modules
			}
			s := m.Name + " " + m.Result
			if m.Result == ModError && m.Errno != 0 {
				s += "(" + errnoName(m.Errno) + ")"
			}
			parts = append(parts, s)
		}
		fmt.Fprintf(&b, "  modules  %s\n", strings.Join(parts, ", "))
	}
	if len(r.GPUs) == 0 {
		b.WriteString("  gpus     none in sysfs\n")
	}
	for _, g := range r.GPUs {
		fmt.Fprintf(&b, "  gpu      %s %s:%s x%d/x%d %s bar1 %s numa %d", g.BDF,
			strings.TrimPrefix(g.Vendor, "0x"), strings.TrimPrefix(g.Device, "0x"),
			g.Link.CurrentWidth, g.Link.MaxWidth, g.Link.CurrentSpeed, HumanBytes(g.BAR1Bytes), g.NUMANode)
		if g.P2PMode != "" {
			fmt.Fprintf(&b, " p2p %s", g.P2PMode) // the driver's BAR1 mode for this GPU
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "  cuda     %s\n", libLine(r.CUDA.Library, r.CUDA.Loaded, r.CUDA.Error, "cuInit", r.CUDA.CuInit, cudaVersion(r.CUDA.DriverVersion)))
	fmt.Fprintf(&b, "  nvml     %s\n", libLine(r.NVML.Library, r.NVML.Loaded, r.NVML.Error, "init", r.NVML.Init, r.NVML.DriverVersion))
	if r.DeadlineExceeded != "" {
		fmt.Fprintf(&b, "  stalled  in %s\n", r.DeadlineExceeded)
	}
	info := 0
	for _, f := range r.Findings {
		if f.Status == SevInfo {
			info++
			continue
		}
		fmt.Fprintf(&b, "  %-4s     %s: %s\n", strings.ToUpper(f.Status), f.ID, f.Message)
		if f.Hint != "" {
			fmt.Fprintf(&b, "           hint: %s\n", f.Hint)
		}
	}
	if info > 0 {
		fmt.Fprintf(&b, "  (%d info finding(s) in the JSON report)\n", info)
	}
	return b.String()
}

func libLine(lib string, loaded bool, errText, initName string, st *Status, version string) string {
	lib = orDefault(lib, "?")
	if !loaded {
		return lib + " not loaded: " + errText
	}
	s := lib + " loaded"
	if st != nil {
		s += fmt.Sprintf(", %s %s (%d)", initName, st.Name, st.Code)
	}
	if version != "" {
		s += ", driver " + version
	}
	return s
}

// cudaVersion renders cuDriverGetVersion's 1000*major + 10*minor as "12.2".
func cudaVersion(v int) string {
	if v <= 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d", v/1000, (v%1000)/10)
}

func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}

// errnoName names the errnos module loading produces, without importing x/sys so the
// package stays portable for report collectors on other systems.
func errnoName(n int) string {
	names := map[int]string{1: "EPERM", 2: "ENOENT", 8: "ENOEXEC", 12: "ENOMEM", 14: "EFAULT", 16: "EBUSY",
		17: "EEXIST", 19: "ENODEV", 22: "EINVAL", 74: "EBADMSG", 110: "ETIMEDOUT", 129: "EKEYREJECTED"}
	if s, ok := names[n]; ok {
		return s
	}
	return fmt.Sprintf("errno %d", n)
}
