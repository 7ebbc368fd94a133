package measure_test

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"debug/pe"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/internal/stubtest"
	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/measure"
)

// synthStub is a minimal PE32+ EFI application (.text, .data), enough for
// image.WriteUKI to append sections to; the real stub is realStub.
func synthStub(t testing.TB) []byte {
	t.Helper()
	var b bytes.Buffer
	w := func(v any) {
		if err := binary.Write(&b, binary.LittleEndian, v); err != nil {
			t.Fatal(err)
		}
	}
	dos := make([]byte, 0x40)
	dos[0], dos[1] = 'M', 'Z'
	binary.LittleEndian.PutUint32(dos[0x3c:], 0x40)
	b.Write(dos)
	b.WriteString("PE\x00\x00")
	w(pe.FileHeader{Machine: pe.IMAGE_FILE_MACHINE_AMD64, NumberOfSections: 2, SizeOfOptionalHeader: 240, Characteristics: 0x206})
	w(pe.OptionalHeader64{
		Magic: 0x20b, AddressOfEntryPoint: 0x1000, BaseOfCode: 0x1000,
		SectionAlignment: 0x1000, FileAlignment: 0x200, SizeOfImage: 0x3000, SizeOfHeaders: 0x400,
		Subsystem: pe.IMAGE_SUBSYSTEM_EFI_APPLICATION, NumberOfRvaAndSizes: 16,
	})
	var text, data [8]uint8
	copy(text[:], ".text")
	copy(data[:], ".data")
	w(pe.SectionHeader32{Name: text, VirtualSize: 3, VirtualAddress: 0x1000, SizeOfRawData: 0x200, PointerToRawData: 0x400, Characteristics: 0x60000020})
	w(pe.SectionHeader32{Name: data, VirtualSize: 9, VirtualAddress: 0x2000, SizeOfRawData: 0x200, PointerToRawData: 0x600, Characteristics: 0xC0000040})
	out := make([]byte, 0x800)
	copy(out, b.Bytes())
	copy(out[0x400:], []byte{0x31, 0xC0, 0xC3})
	copy(out[0x600:], "stub data")
	return out
}

// fakeKernel is n bytes that read as a PE image with SizeOfImage soi, as a
// bzImage does: WriteUKI then gives .linux a VirtualSize of soi.
func fakeKernel(n int, soi uint32) []byte {
	k := make([]byte, n)
	for i := range k {
		k[i] = byte(i*7 + i>>9)
	}
	copy(k, "MZ")
	binary.LittleEndian.PutUint32(k[0x3c:], 0x40)
	copy(k[0x40:], "PE\x00\x00")
	binary.LittleEndian.PutUint16(k[0x40+24:], 0x20b)
	binary.LittleEndian.PutUint32(k[0x40+24+56:], soi)
	return k
}

// realStub is systemd's linuxx64.efi.stub as the default lock pins it
// (stubtest.Real: from the store `peerboot fetch` fills, or PEERBOOT_STUB).
func realStub(t testing.TB) []byte { return stubtest.Real(t, "../recipes/default.lock") }

func testKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func testUKI(t testing.TB, stub []byte, pcrpkey []byte) image.UKI {
	return image.UKI{
		Stub:      stub,
		Kernel:    fakeKernel(150001, 0x40000), // SizeOfImage well past the file: zero-filled when loaded
		Initrd:    bytes.Repeat([]byte("initrd\x00"), 12345),
		Cmdline:   "console=ttyS0 peerboot.selftest=1",
		OSRelease: "ID=peerboot\nVERSION_ID=1\n",
		PCRPKey:   pcrpkey,
	}
}

func writeUKI(t testing.TB, u image.UKI) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := image.WriteUKI(&b, u); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// handSections reads the sections the stub measures with debug/pe, following
// the rules written out again: systemd-stub 252 measures, in the order
// .linux .osrel .cmdline .initrd .splash .dtb .pcrpkey (never .pcrsig), each
// present section's VirtualSize bytes as loaded: its file data, cut at
// VirtualSize or zero-filled up to it.
func handSections(t *testing.T, uki []byte) map[string][]byte {
	t.Helper()
	f, err := pe.NewFile(bytes.NewReader(uki))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, s := range f.Sections {
		raw, err := s.Data()
		if err != nil {
			t.Fatal(err)
		}
		mem := make([]byte, s.VirtualSize)
		copy(mem, raw)
		out[s.Name] = mem
	}
	return out
}

var measuredOrder = []string{".linux", ".osrel", ".cmdline", ".initrd", ".splash", ".dtb", ".pcrpkey"}

// handPCR11 is the extend chain, by hand: PCR starts at zero; each section
// extends H(name + NUL) then H(data); each phase word extends H(word).
func handPCR11(secs map[string][]byte, words ...string) [32]byte {
	var pcr [32]byte
	ext := func(data []byte) {
		d := sha256.Sum256(data)
		pcr = sha256.Sum256(append(pcr[:], d[:]...))
	}
	for _, n := range measuredOrder {
		if d, ok := secs[n]; ok && len(d) > 0 {
			ext([]byte(n + "\x00"))
			ext(d)
		}
	}
	for _, w := range words {
		ext([]byte(w))
	}
	return pcr
}

func TestPredictByHand(t *testing.T) {
	key := testKey(t)
	pkey, err := measure.PublicKeyPEM(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, stub := range map[string]func(testing.TB) []byte{"synthetic stub": synthStub, "systemd stub": realStub} {
		t.Run(name, func(t *testing.T) {
			for _, withKey := range []bool{false, true} {
				u := testUKI(t, stub(t), nil)
				if withKey {
					u.PCRPKey = pkey
				}
				uki := writeUKI(t, u)
				p, err := measure.Predict(uki)
				if err != nil {
					t.Fatal(err)
				}
				secs := handSections(t, uki)
				if l := secs[".linux"]; len(l) != 0x40000 || !bytes.Equal(l[:len(u.Kernel)], u.Kernel) || bytes.ContainsFunc(l[len(u.Kernel):], func(r rune) bool { return r != 0 }) {
					t.Fatalf(".linux in memory is %d bytes, want the kernel then zeros up to its SizeOfImage 0x40000", len(l))
				}
				want := "[.linux .osrel .cmdline .initrd]"
				if withKey {
					want = "[.linux .osrel .cmdline .initrd .pcrpkey]"
				}
				if got := strings.Join(strings.Fields(strings.Trim(strings.Join(p.Sections, " "), " ")), " "); "["+got+"]" != want {
					t.Errorf("measured sections %v, want %s", p.Sections, want)
				}
				for _, ph := range append([]string{""}, measure.DefaultPhases...) {
					got, ok := p.Value(ph)
					if !ok {
						t.Fatalf("no prediction for phase %q", ph)
					}
					var words []string
					if ph != "" {
						words = strings.Split(ph, ":")
					}
					if exp := handPCR11(secs, words...); got != exp {
						t.Errorf("key %v phase %q: Predict %x, by hand %x", withKey, ph, got, exp)
					}
				}
			}
		})
	}
}

// One changed byte anywhere in a measured section changes every phase's value;
// a changed .pcrsig changes none.
func TestPredictSensitivity(t *testing.T) {
	u := testUKI(t, synthStub(t), nil)
	base, _ := measure.Predict(writeUKI(t, u))
	u2 := u
	u2.Cmdline = strings.Replace(u.Cmdline, "ttyS0", "ttyS1", 1)
	changed, _ := measure.Predict(writeUKI(t, u2))
	for i := range base.Phases {
		if base.Phases[i].PCR11 == changed.Phases[i].PCR11 {
			t.Errorf("phase %q: one changed .cmdline byte left PCR 11 at %x", base.Phases[i].Name, base.Phases[i].PCR11)
		}
	}
	u3 := u
	u3.PCRSig = []byte(`{"sha256":[]}`)
	sig, err := measure.Predict(writeUKI(t, u3))
	if err != nil {
		t.Fatal(err)
	}
	if sig.Phases[0].PCR11 != base.Phases[0].PCR11 {
		t.Error(".pcrsig changed the prediction; systemd-stub does not measure it")
	}
}

func systemdMeasure(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/lib/systemd/systemd-measure", "/usr/lib/systemd/systemd-measure"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	testguard.Skip(t, "systemd-measure not found (Debian's systemd 252 ships /lib/systemd/systemd-measure)")
	return ""
}

// sectionFiles writes the measured sections' in-memory bytes to files and
// returns systemd-measure's --SECTION=FILE arguments for them.
func sectionFiles(t *testing.T, secs map[string][]byte) []string {
	dir := t.TempDir()
	var args []string
	for _, n := range measuredOrder {
		d, ok := secs[n]
		if !ok {
			continue
		}
		p := filepath.Join(dir, strings.TrimPrefix(n, "."))
		if err := os.WriteFile(p, d, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--"+strings.TrimPrefix(n, ".")+"="+p)
	}
	return args
}

type calcJSON struct {
	SHA256 []struct {
		Phase string `json:"phase"`
		PCR   int    `json:"pcr"`
		Hash  string `json:"hash"`
	} `json:"sha256"`
}

func calculate(t *testing.T, tool string, args ...string) calcJSON {
	t.Helper()
	cmd := exec.Command(tool, append([]string{"calculate", "--bank=sha256", "--json=short"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v: %s", cmd.Args, err, stderr.String())
	}
	var c calcJSON
	if err := json.Unmarshal(out, &c); err != nil {
		t.Fatalf("systemd-measure output %q: %v", out, err)
	}
	return c
}

// TestSystemdMeasureCalculate cross-checks Predict with systemd's own
// calculator on the same section bytes (the default phases, and --phase= for
// the value right after the stub).
func TestSystemdMeasureCalculate(t *testing.T) {
	tool := systemdMeasure(t)
	key := testKey(t)
	pkey, _ := measure.PublicKeyPEM(&key.PublicKey)
	for name, stub := range map[string]func(testing.TB) []byte{"synthetic stub": synthStub, "systemd stub": realStub} {
		t.Run(name, func(t *testing.T) {
			uki := writeUKI(t, testUKI(t, stub(t), pkey))
			p, err := measure.Predict(uki)
			if err != nil {
				t.Fatal(err)
			}
			secs := handSections(t, uki)
			args := sectionFiles(t, secs)
			c := calculate(t, tool, args...)
			if len(c.SHA256) != len(measure.DefaultPhases) {
				t.Fatalf("systemd-measure gave %d phases, want %d: %+v", len(c.SHA256), len(measure.DefaultPhases), c)
			}
			for i, e := range c.SHA256 {
				v, ok := p.Value(e.Phase)
				if e.Phase != measure.DefaultPhases[i] || e.PCR != 11 || !ok {
					t.Fatalf("systemd-measure entry %d: %+v", i, e)
				}
				if hex.EncodeToString(v[:]) != e.Hash {
					t.Errorf("phase %s: Predict %x, systemd-measure %s", e.Phase, v, e.Hash)
				}
			}
			stubOnly := calculate(t, tool, append(args, "--phase=")...)
			v, _ := p.Value(measure.PhaseStub)
			if len(stubOnly.SHA256) != 1 || stubOnly.SHA256[0].Hash != hex.EncodeToString(v[:]) {
				t.Errorf("after the stub: Predict %x, systemd-measure %+v", v, stubOnly)
			}

			// The trap Predict avoids: the kernel file alone is not what the stub
			// hashes when .linux's VirtualSize is the kernel's SizeOfImage.
			kf := filepath.Join(t.TempDir(), "bzImage")
			u := testUKI(t, stub(t), pkey)
			os.WriteFile(kf, u.Kernel, 0o644)
			naive := calculate(t, tool, append(replaceArg(args, "--linux=", kf), "--phase=enter-initrd")...)
			ei, _ := p.Value(measure.PhaseEnterInitrd)
			if naive.SHA256[0].Hash == hex.EncodeToString(ei[:]) {
				t.Error("systemd-measure over the bare kernel file agrees with the prediction; the zero-filled VirtualSize should differ")
			}
		})
	}
}

func replaceArg(args []string, prefix, path string) []string {
	out := append([]string(nil), args...)
	for i, a := range out {
		if strings.HasPrefix(a, prefix) {
			out[i] = prefix + path
		}
	}
	return out
}

// defaultUKI is the default recipe's UKI as `make test` builds it first
// (out/default at the top of the tree), or in $PEERBOOT_TEST_IMAGE (an output
// directory, relative to the top of the tree unless absolute).
func defaultUKI(t *testing.T) []byte {
	t.Helper()
	dir := os.Getenv("PEERBOOT_TEST_IMAGE")
	if dir == "" {
		dir = "out/default"
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join("..", dir)
	}
	b, err := os.ReadFile(filepath.Join(dir, "peerboot.efi"))
	if err != nil {
		testguard.Skipf(t, "the default UKI is not built (make image, or set PEERBOOT_TEST_IMAGE): %v", err)
	}
	return b
}

// The real default UKI: the hand-written rules and systemd-measure agree
// with Predict on it, section by section as the stub loads them.
func TestPredictDefaultUKI(t *testing.T) {
	testguard.Short(t, "hashes the 80 MiB default UKI several times")
	tool := systemdMeasure(t)
	uki := defaultUKI(t)
	p, err := measure.Predict(uki)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.Sections, " "); got != ".linux .osrel .cmdline .initrd" && got != ".linux .osrel .cmdline .initrd .pcrpkey" {
		t.Errorf("measured sections %q", got)
	}
	secs := handSections(t, uki)
	ei, _ := p.Value(measure.PhaseEnterInitrd)
	if exp := handPCR11(secs, "enter-initrd"); ei != exp {
		t.Errorf("enter-initrd: Predict %x, by hand %x", ei, exp)
	}
	c := calculate(t, tool, append(sectionFiles(t, secs), "--phase=enter-initrd")...)
	if len(c.SHA256) != 1 || c.SHA256[0].Hash != hex.EncodeToString(ei[:]) {
		t.Errorf("enter-initrd: Predict %x, systemd-measure %+v", ei, c)
	}
	t.Logf("default UKI: PCR 11 at enter-initrd %x (sections %v)", ei, p.Sections)
}
