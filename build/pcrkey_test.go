package build

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"debug/pe"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/measure"
	"github.com/peerboot/peerboot/output"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/store"
)

func testRSAKey(t *testing.T) string {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

// The PCR key reaches only the image stage: turning it on edits the recipe
// (config, initramfs, image), a new key file re-runs the image stage alone.
func TestPCRKeyStageKeys(t *testing.T) {
	dir, write := planFixture(t)
	base := planFor(t, dir)

	write("pcr.key", testRSAKey(t))
	b, _ := os.ReadFile(filepath.Join(dir, "t.toml"))
	write("t.toml", string(b)+"[sign]\npcr_key = \"file:pcr.key\"\n")
	on := planFor(t, dir)
	write("pcr.key", testRSAKey(t))
	newKey := planFor(t, dir)
	for _, c := range []struct {
		name   string
		a, b   map[StageName]string
		change []StageName
	}{{"pcr key on", base, on, []StageName{StageConfig, StageInitramfs, StageImage}}, {"new pcr key", on, newKey, []StageName{StageImage}}} {
		var got []StageName
		for _, s := range StageNames() {
			if c.a[s] != c.b[s] {
				got = append(got, s)
			}
		}
		if !slices.Equal(got, c.change) {
			t.Errorf("%s changed the keys of %v, want %v", c.name, got, c.change)
		}
	}
}

// A key systemd cannot use is a recipe error at the line naming it.
func TestPCRKeyRejected(t *testing.T) {
	dir := t.TempDir()
	ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(ek)
	os.WriteFile(filepath.Join(dir, "ec.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
	body := strings.NewReplacer("%s", strings.Repeat("a", 64)).Replace(planRecipe)
	for _, tc := range []struct{ ref, want string }{
		{"file:ec.key", "RSA keys only"},
		{"file:missing.key", "missing.key"},
	} {
		os.WriteFile(filepath.Join(dir, "t.toml"), []byte(body+"[sign]\npcr_key = \""+tc.ref+"\"\n"), 0o644)
		r, err := recipe.Load(filepath.Join(dir, "t.toml"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = ReadData(r, Tools{})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "t.toml:") || !strings.Contains(err.Error(), "sign.pcr_key") {
			t.Errorf("%s: %v, want a located sign.pcr_key error containing %q", tc.ref, err, tc.want)
		}
	}
}

// tinyStub is a minimal PE32+ EFI application image.WriteUKI accepts.
func tinyStub(t *testing.T) []byte {
	var b bytes.Buffer
	dos := make([]byte, 0x40)
	dos[0], dos[1] = 'M', 'Z'
	binary.LittleEndian.PutUint32(dos[0x3c:], 0x40)
	b.Write(dos)
	b.WriteString("PE\x00\x00")
	binary.Write(&b, binary.LittleEndian, pe.FileHeader{Machine: pe.IMAGE_FILE_MACHINE_AMD64, NumberOfSections: 1, SizeOfOptionalHeader: 240, Characteristics: 0x206})
	binary.Write(&b, binary.LittleEndian, pe.OptionalHeader64{Magic: 0x20b, SectionAlignment: 0x1000, FileAlignment: 0x200,
		SizeOfImage: 0x2000, SizeOfHeaders: 0x400, Subsystem: pe.IMAGE_SUBSYSTEM_EFI_APPLICATION, NumberOfRvaAndSizes: 16})
	var n [8]uint8
	copy(n[:], ".text")
	binary.Write(&b, binary.LittleEndian, pe.SectionHeader32{Name: n, VirtualSize: 3, VirtualAddress: 0x1000, SizeOfRawData: 0x200, PointerToRawData: 0x400, Characteristics: 0x60000020})
	out := make([]byte, 0x600)
	copy(out, b.Bytes())
	return out
}

// measuredUKI is writeMeasuredUKI's file, read back.
func measuredUKI(t *testing.T, u image.UKI, key crypto.Signer) ([]byte, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "peerboot.efi")
	if err := writeMeasuredUKI(p, u, key, nil, nil); err != nil {
		return nil, err
	}
	return os.ReadFile(p)
}

func TestWriteMeasuredUKI(t *testing.T) {
	u := image.UKI{Stub: tinyStub(t), Kernel: bytes.Repeat([]byte("kernel"), 5000), Initrd: []byte("initrd"), Cmdline: "console=ttyS0", OSRelease: "ID=t\n"}
	var plain bytes.Buffer
	if err := image.WriteUKI(&plain, u); err != nil {
		t.Fatal(err)
	}
	noKey, err := measuredUKI(t, u, nil)
	if err != nil || !bytes.Equal(noKey, plain.Bytes()) {
		t.Fatalf("without a PCR key the UKI must be the plain one (err %v)", err)
	}
	key, err := pcrSigner([]byte(testRSAKey(t)))
	if err != nil {
		t.Fatal(err)
	}
	a, err := measuredUKI(t, u, key)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := measuredUKI(t, u, key)
	if !bytes.Equal(a, b) {
		t.Error("the signed UKI is not reproducible")
	}
	res, err := measure.Check(a)
	if err != nil || !res.Signed {
		t.Fatalf("Check: %+v %v", res, err)
	}
	f, err := pe.NewFile(bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range f.Sections {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, " "); got != ".text .osrel .cmdline .initrd .pcrpkey .pcrsig .linux" {
		t.Errorf("sections %s", got)
	}
}

// Publish records the predicted PCR 11 of the UKI in manifest.json.
func TestPublishPCR11(t *testing.T) {
	st, _ := store.Open(t.TempDir())
	uki, err := measuredUKI(t, image.UKI{Stub: tinyStub(t), Kernel: bytes.Repeat([]byte("kernel"), 900), Cmdline: "console=ttyS0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := "image-" + strings.Repeat("3", 64)
	imageOutput(t, st, key, string(uki))
	r := &recipe.Resolved{Recipe: recipe.Recipe{Name: "t"}, Digest: "sha256:" + strings.Repeat("d", 64)}
	dir, err := Publish(context.Background(), &Plan{Recipe: r, Stages: []*Stage{{Name: "image", Key: key}}}, st, nil, 1700000000, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var m output.Manifest
	b, _ := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	p, _ := measure.Predict(uki)
	want, _ := p.Value(measure.PhaseEnterInitrd)
	if m.PCR11 == nil || m.PCR11.Bank != "sha256" || strings.Join(m.PCR11.Sections, " ") != ".linux .cmdline" {
		t.Fatalf("manifest pcr11: %+v", m.PCR11)
	}
	found := false
	for _, ph := range m.PCR11.Phases {
		if ph.Phase == measure.PhaseEnterInitrd {
			found = ph.Value == hex.EncodeToString(want[:])
		}
	}
	if !found || len(m.PCR11.Phases) != 5 {
		t.Errorf("manifest pcr11 phases %+v, want enter-initrd = %x", m.PCR11.Phases, want)
	}
}
