package nvrun

import (
	"fmt"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/nvrun/nvruntest"
)

// fileList is take's result as one line a file: kind, name, mode, and a
// link's target.
func fileList(fs []File) string {
	var out []string
	for _, f := range fs {
		if f.Kind == KindLink {
			out = append(out, fmt.Sprintf("%s %s -> %s", f.Kind, f.Name, f.Link))
			continue
		}
		out = append(out, fmt.Sprintf("%s %s %o", f.Kind, f.Name, f.Mode.Perm()))
	}
	return strings.Join(out, "\n")
}

// Which manifest lines the image takes, at the edges of take's checks (make
// mutants' nvrun survivors): only native entries, only FIRMWARE lines of GSP
// images, nvidia-smi wherever it is listed, and a file the image takes under a
// type this package does not know is refused by name. Each case goes through
// take with every file of the payload staged, as readPayload stages them.
func TestTakeEdges(t *testing.T) {
	base := nvruntest.Manifest(v)
	// The manifest's first entry line (line 9) and the rest.
	head := strings.Join(strings.SplitAfter(base, "\n")[:8], "")
	entries := strings.TrimPrefix(base, head)
	smi := "nvidia-smi 0755 UTILITY_BINARY MODULE:nvml\n"
	want := strings.Join(imageFiles(), "\n")
	have := map[string]staged{}
	for p := range nvruntest.Default(v) {
		have[p] = staged{path: "/staged/" + p, size: 1}
	}
	// A GSP-named file listed under another type is in the payload too:
	// readPayload stages every file by its name alone.
	have["firmware/gsp_extra.bin"] = staged{path: "/staged/gsp_extra", size: 1}
	for _, c := range []struct {
		name, manifest string
		err            string // "": takes want
	}{
		// nvidia-smi on the first entry line is found (index 0 is a hit).
		{"nvidia-smi listed first", head + smi + strings.Replace(entries, smi, "", 1), ""},
		// A COMPAT32 line is never the image's, even without the usual
		// "32/" directory in its name: no second libcuda.so.1 link, and
		// the 32-bit library's mode does not replace the native one's.
		{"COMPAT32 lines without a directory", base +
			"libcuda.so.1 0000 CUDA_SYMLINK COMPAT32 / libcuda.so." + v + " MODULE:gpgpu\n" +
			"libnvidia-ml.so." + v + " 0700 UTILITY_LIB COMPAT32 MODULE:nvml\n", ""},
		// Only FIRMWARE lines of GSP images are firmware: another FIRMWARE
		// file is not taken (nor looked for in the payload), and a GSP-named
		// file of another type is not firmware.
		{"other firmware", base + "firmware/nvidia-other.bin 0644 FIRMWARE INHERIT_PATH_DEPTH:1 MODULE:resman\n", ""},
		{"GSP name, another type", base + "firmware/gsp_extra.bin 0644 EXPLICIT_PATH /opt MODULE:resman\n", ""},
		// A file the image takes, under a type newer than this package:
		// refused for its type, whichever kind of file it is.
		{"library of an unknown type", strings.Replace(base, "libcuda.so."+v+" 0755 CUDA_LIB NATIVE", "libcuda.so."+v+" 0755 CUDA_LIB_V2 NATIVE", 1),
			"libcuda.so." + v + " has file type CUDA_LIB_V2, which this peerboot does not know"},
		{"soname link of an unknown type", strings.Replace(base, "libcuda.so.1 0000 CUDA_SYMLINK", "libcuda.so.1 0000 CUDA_SYMLINK_V2", 1),
			"libcuda.so.1 has file type CUDA_SYMLINK_V2, which this peerboot does not know"},
		{"firmware of an unknown type", strings.Replace(base, "firmware/gsp_ga10x.bin 0644 FIRMWARE", "firmware/gsp_ga10x.bin 0644 FIRMWARE_V2", 1),
			"firmware/gsp_ga10x.bin has file type FIRMWARE_V2, which this peerboot does not know"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := ParseManifest([]byte(c.manifest))
			if err != nil {
				t.Fatal(err)
			}
			files, err := take(m, have, v)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := fileList(files); got != want {
				t.Errorf("took:\n%s\nwant:\n%s", got, want)
			}
		})
	}
	// The cases change only what they say: the unchanged manifest takes the same.
	m, err := ParseManifest([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if files, err := take(m, have, v); err != nil || fileList(files) != want {
		t.Fatalf("the base manifest: %v\n%s", err, fileList(files))
	}
	if !strings.Contains(entries, "\n"+smi) {
		t.Fatal("the base manifest must list nvidia-smi, and not first")
	}
}
