package sign

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/initramfs"
	"github.com/peerboot/peerboot/output"
	"github.com/peerboot/peerboot/sign/modsign"
)

// initrdWith packs a zstd cpio holding the given modules (path -> bytes).
func initrdWith(t *testing.T, mods map[string][]byte) []byte {
	t.Helper()
	root := t.TempDir()
	for p, b := range mods {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(root, p), b, 0o644)
	}
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/hostname"), []byte("node\n"), 0o644)
	var buf bytes.Buffer
	if _, err := initramfs.Pack(context.Background(), root, 1700000000, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func signedModule(t *testing.T, body string, keyFile, certFile string) []byte {
	t.Helper()
	k, err := LoadSigner(key(keyFile))
	if err != nil {
		t.Fatal(err)
	}
	b, err := modsign.Sign([]byte(body), k, mustCert(t, key(certFile)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestVerifyModules(t *testing.T) {
	good := map[string][]byte{
		"usr/lib/modules/6.1.192/kernel/drivers/net/igb.ko": signedModule(t, "igb", ModuleKeyFile, ModuleCertFile),
		"usr/lib/modules/6.1.192/updates/dkms/nvidia.ko":    signedModule(t, "nvidia", ModuleKeyFile, ModuleCertFile),
	}
	// Another key, with a certificate the verifier is not given: the db key set
	// stands in for "a module signed with another key".
	wrong := signedModule(t, "nvidia", DBKeyFile, DBCertFile)
	for _, c := range []struct {
		name string
		mods map[string][]byte
		want string // "" = passes
	}{
		{"all signed", good, ""},
		// As the initramfs stage writes it: NUL padding after the last frame.
		{"all signed, padded to a MiB", good, ""},
		{"another key", map[string][]byte{"usr/lib/modules/6.1.192/updates/dkms/nvidia.ko": wrong}, "module /usr/lib/modules/6.1.192/updates/dkms/nvidia.ko: " + modsign.ErrUnknownKey.Error()},
		{"unsigned", map[string][]byte{"usr/lib/modules/6.1.192/updates/dkms/nvidia.ko": []byte("nvidia")}, modsign.ErrUnsigned.Error()},
		{"no modules", map[string][]byte{}, "holds no kernel modules"},
		// Three failing alike are all named, with nothing "more".
		{"three unsigned", map[string][]byte{"m/a.ko": []byte("a"), "m/b.ko": []byte("b"), "m/c.ko": []byte("c")},
			"3 of 3 modules: " + modsign.ErrUnsigned.Error() + " (/m/a.ko, /m/b.ko, /m/c.ko)"},
		// Five modules failing alike make one problem naming three of them.
		{"five unsigned", map[string][]byte{"m/a.ko": []byte("a"), "m/b.ko": []byte("b"), "m/c.ko": []byte("c"), "m/d.ko": []byte("d"), "m/e.ko": []byte("e")},
			"5 of 5 modules: " + modsign.ErrUnsigned.Error() + " (/m/a.ko, /m/b.ko, /m/c.ko, and 2 more)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			initrd := initrdWith(t, c.mods)
			if strings.HasSuffix(c.name, "padded to a MiB") {
				initrd = append(initrd, make([]byte, 1<<20-len(initrd)%(1<<20))...)
			}
			dir := writeSyntheticWith(t, false, map[string][]byte{"pxe/initrd.img": initrd})
			log, err := signVerify(t, dir)
			var ve *VerifyError
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Verify: %v", err)
			case c.want == "":
				if !strings.Contains(log, "verify: pxe/initrd.img: 2 module signatures OK ("+moduleCertCN+")\n") {
					t.Errorf("log does not report the modules checked:\n%s", log)
				}
			case !errors.As(err, &ve) || !names(ve, "pxe/initrd.img") || !strings.Contains(err.Error(), c.want):
				t.Errorf("Verify: %v; want a problem for pxe/initrd.img containing %q", err, c.want)
			}
		})
	}
}

// moduleCertCN is the test module certificate's common name, which verify's
// log names it by.
const moduleCertCN = "peerboot TEST module signing key (NOT FOR PRODUCTION)"

// ukiWithInitrd is a UKI whose .initrd section is initrd (none when nil).
func ukiWithInitrd(t *testing.T, initrd []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	u := image.UKI{Stub: ukiStub(), Kernel: bytes.Repeat([]byte("bzImage "), 3000), Initrd: initrd, Cmdline: "console=ttyS0", OSRelease: "ID=peerboot\n"}
	if err := image.WriteUKI(&b, u); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Without pxe/initrd.img, the modules verify checks are those in the UKI's
// .initrd section: a module there signed with another key is named, under the
// UKI. A UKI without an .initrd section leaves nothing to check, and an
// output with nothing to check is refused rather than passed.
func TestVerifyModulesInTheUKI(t *testing.T) {
	const mod = "usr/lib/modules/6.1.192/updates/dkms/nvidia.ko"
	for _, c := range []struct {
		name    string
		uki     []byte
		problem Problem // zero: Verify passes; What: the problem's start
		log     string
	}{
		{"signed modules", ukiWithInitrd(t, initrdWith(t, map[string][]byte{mod: signedModule(t, "nvidia", ModuleKeyFile, ModuleCertFile)})),
			Problem{}, "verify: peerboot.efi (.initrd section): 1 module signatures OK (" + moduleCertCN + ")\n"},
		{"a module signed with another key", ukiWithInitrd(t, initrdWith(t, map[string][]byte{mod: signedModule(t, "nvidia", DBKeyFile, DBCertFile)})),
			Problem{output.UKIFile, "module /" + mod + ": " + modsign.ErrUnknownKey.Error() + ` (signer: issuer "CN=peerboot TEST Secure Boot db key (NOT FOR PRODUCTION),O=peerboot test keys", serial `}, ""},
		{"no .initrd section", ukiWithInitrd(t, nil),
			Problem{output.SumsFile, "lists no initrd.img, and no UKI with an .initrd section, whose modules could be checked against the module certificate"},
			"verify: peerboot.efi: no .initrd section, no modules to check\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeSyntheticWith(t, false, map[string][]byte{output.UKIFile: c.uki})
			unlist(t, dir, "pxe/initrd.img")
			log, err := signVerify(t, dir)
			var ve *VerifyError
			switch {
			case c.problem == (Problem{}) && err != nil:
				t.Errorf("Verify: %v", err)
			case c.problem != (Problem{}) && (!errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].File != c.problem.File || !strings.HasPrefix(ve.Problems[0].What, c.problem.What)):
				t.Errorf("Verify = %v, want the one problem %s: %s", err, c.problem.File, c.problem.What)
			}
			if !strings.Contains(log, c.log) {
				t.Errorf("log lacks %q:\n%s", c.log, log)
			}
		})
	}
}

// An output that was never signed is one problem that says what to run.
func TestVerifyUnsigned(t *testing.T) {
	dir := writeSyntheticWith(t, false, map[string][]byte{"pxe/initrd.img": []byte("x")})
	err := Verify(context.Background(), dir, VerifyOptions{Key: filepath.Join(testKeys, ArtifactPubFile)})
	var ve *VerifyError
	if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].File != output.SumsSigFile ||
		!strings.HasPrefix(ve.Problems[0].What, "not signed: run `peerboot sign "+dir) {
		t.Fatalf("Verify of an unsigned output: %v; want one problem, %s: not signed: run `peerboot sign ...`", err, output.SumsSigFile)
	}
}

// signVerify signs the output in dir with the test artifact key and verifies
// it with the test module certificate: Verify's log and error.
func signVerify(t *testing.T, dir string) (string, error) {
	t.Helper()
	ctx := context.Background()
	if err := SignOutput(ctx, dir, Options{ArtifactKey: key(ArtifactKeyFile), Version: "test"}); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	err := Verify(ctx, dir, VerifyOptions{Key: filepath.Join(testKeys, ArtifactPubFile), ModuleCert: filepath.Join(testKeys, ModuleCertFile), Log: &log})
	return log.String(), err
}
