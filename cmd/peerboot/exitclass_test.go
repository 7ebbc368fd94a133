package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
	"github.com/ProtonMail/go-crypto/openpgp/packet"

	"github.com/peerboot/peerboot/exitcode"
)

// archive is a signed Debian-style repository on loopback: InRelease and one
// Packages index, each of which a case may spoil.
type archive struct {
	srv     *httptest.Server
	files   map[string][]byte
	keyring string // the public key that signs InRelease
	hang    chan struct{}
}

const archivePackages = "Package: hello\nVersion: 1.0-1\nArchitecture: amd64\nFilename: pool/main/h/hello/hello_1.0-1_amd64.deb\nSize: 12\nSHA256: " +
	"0000000000000000000000000000000000000000000000000000000000000001\n\n"

func newArchive(t *testing.T) *archive {
	t.Helper()
	key, err := openpgp.NewEntity("archive", "", "archive@example.invalid", &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA})
	if err != nil {
		t.Fatal(err)
	}
	a := &archive{files: map[string][]byte{}, hang: make(chan struct{}, 1)}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/hang/InRelease") {
			a.hang <- struct{}{}
			<-r.Context().Done() // until the client gives up
			return
		}
		b, ok := a.files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	}))
	t.Cleanup(a.srv.Close)
	var pub bytes.Buffer
	if err := key.Serialize(&pub); err != nil {
		t.Fatal(err)
	}
	a.keyring = filepath.Join(t.TempDir(), "archive.gpg")
	os.WriteFile(a.keyring, pub.Bytes(), 0o644)
	a.publish(t, "good", key, archivePackages, archivePackages)
	stranger, _ := openpgp.NewEntity("stranger", "", "x@example.invalid", &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA})
	a.publish(t, "strangers", stranger, archivePackages, archivePackages)
	a.publish(t, "tampered", key, archivePackages, strings.Replace(archivePackages, "1.0-1", "6.6-6", -1))
	return a
}

// publish serves suite: InRelease signed by key listing listed's hash, and served as the index.
func (a *archive) publish(t *testing.T, suite string, key *openpgp.Entity, listed, served string) {
	t.Helper()
	sum := sha256.Sum256([]byte(listed))
	text := fmt.Sprintf("Origin: Test\nSuite: %s\nCodename: %s\nDate: Sat, 10 May 2025 08:58:14 UTC\nComponents: main\nSHA256:\n %x %d main/binary-amd64/Packages\n",
		suite, suite, sum, len(listed))
	var buf bytes.Buffer
	w, err := clearsign.Encode(&buf, key.PrivateKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, text)
	w.Close()
	a.files["/debian/dists/"+suite+"/InRelease"] = buf.Bytes()
	a.files["/debian/dists/"+suite+"/main/binary-amd64/Packages"] = []byte(served)
}

// lockRecipe is a recipe whose only Debian package is the EFI stub.
func lockRecipe(dir, name, url, suite, keyring, stub string) string {
	path := filepath.Join(dir, name+".toml")
	os.WriteFile(path, []byte(fmt.Sprintf(`name = "x"
[[repo]]
suite = %q
components = ["main"]
keyring = %q
url = %q
[kernel]
source = { url = "https://example.invalid/linux.tar.xz", sha256 = "%s" }
[driver]
version = "535.261.03"
source = { url = "https://example.invalid/nvidia.tar.xz", sha256 = "%[4]s" }
[outputs]
efi_stub = { deb = %q }
`, suite, keyring, url, strings.Repeat("a", 64), stub)), 0o644)
	return path
}

// Every documented exit code class, through the real binary. Network cases
// speak to a signed archive on loopback.
func TestExitCodeClasses(t *testing.T) {
	dir := t.TempDir()
	a := newArchive(t)
	url := a.srv.URL + "/debian"
	// A port nothing listens on: the network class.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + ln.Addr().String() + "/debian"
	ln.Close()

	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	// A recipe that needs no lock (URL sources only), then the line under test.
	src := fmt.Sprintf("source = { url = \"https://example.invalid/s.tar.xz\", sha256 = \"%s\" }\n", strings.Repeat("a", 64))
	base := "name = \"t\"\n[outputs]\nefi_stub = { url = \"https://example.invalid/stub.deb\", sha256 = \"" + strings.Repeat("a", 64) + "\" }\n[kernel]\n" + src + "[driver]\nversion = \"535.261.03\"\n" + src
	missingPatch := write("patch/t.toml", base+"patches = [\"./0001-there.patch\", \"./0002-gone.patch\"]\n")
	write("patch/0001-there.patch", "x\n")
	missingFrag := write("frag/t.toml", strings.Replace(base, "[kernel]\n", "[kernel]\nfragments = [\"base.config\", \"nosuch.config\"]\n", 1))
	badType := write("types/t.toml", "[platform]\ngpus = \"eight\"\nsockets = \"two\"\n[selftest]\nverify = 3\n")
	noKeyring := lockRecipe(dir, "nokeyring", url, "good", filepath.Join(dir, "absent.gpg"), "hello")
	unfetched := write("unfetched/t.toml", base)
	// One problem of each class a recipe can have: reported together.
	fourClasses := write("four/t.toml", strings.Replace(base, "[kernel]\n", "[platform]\ngpus = \"eight\"\nsokets = 2\nnuma_nodes = 99\n[kernel]\npatches = [\"./0001-gone.patch\"]\n", 1))
	// A kernel "tarball" that is not one, imported into a store of its own: the
	// kernel stage fails (build, exit 8).
	junk := write("junk/linux.tar.xz", "not a tarball\n")
	junkSum := sha256.Sum256([]byte("not a tarball\n"))
	junkRecipe := write("junk/t.toml", strings.Replace(base, "[kernel]\n"+src, fmt.Sprintf("[kernel]\nsource = { url = \"https://example.invalid/linux.tar.xz\", sha256 = \"%x\" }\n", junkSum), 1))
	junkCache := filepath.Join(dir, "junk", "cache")
	if out, errs, code := run(t, "--cache", junkCache, "store", "import", junkRecipe, junk); code != 0 {
		t.Fatalf("store import: exit %d\n%s%s", code, out, errs)
	}
	// A PATH without QEMU: the host-tools class (exit 7).
	noTools := []string{"PATH=" + t.TempDir()}
	outDir := t.TempDir()

	cases := []struct {
		name string
		args []string
		code int
		re   string   // stderr must match
		env  []string // added to the environment
	}{
		{"unknown subcommand", []string{"frobnicate"}, 2, `^peerboot: unknown command "frobnicate" for "peerboot"`, nil},
		{"unknown subcommand of a group", []string{"store", "frob"}, 2, `unknown command "frob" for "peerboot store"`, nil},
		{"unknown flag", []string{"plan", "--no-such-flag"}, 2, `unknown flag: --no-such-flag`, nil},
		{"missing argument", []string{"keys", "init"}, 2, `^peerboot: keys init: want 1 argument\(s\), got 0 \(usage: peerboot keys init DIR`, nil},
		{"too many arguments", []string{"run", "a", "b"}, 2, `^peerboot: run: want at most 1 argument\(s\), got 2 \(usage: peerboot run`, nil},
		{"bad flag value", []string{"run", "--accel", "bogus", dir}, 2, `^peerboot: --accel: want kvm or tcg, got "bogus"`, nil},
		{"extra argument", []string{"version", "extra"}, 2, `^peerboot: version: want 0 argument\(s\), got 1 \(usage: peerboot version`, nil},
		{"three wrong types", []string{"plan", badType}, 3, `(?s)t.toml:2: platform.gpus: wrong type.*t.toml:3: platform.sockets: wrong type.*t.toml:5: selftest.verify: wrong type`, nil},
		{"four classes in one run", []string{"plan", fourClasses}, 3, `^\S*four/t.toml:5: platform.gpus: wrong type: want an integer, got a string\n\S*four/t.toml:6: platform.sokets: unknown key \(did you mean platform.sockets\?\)\n\S*four/t.toml:7: platform.numa_nodes: want 1..64, got 99\n\S*four/t.toml:9: kernel.patches\[0\]: no file \S*four/0001-gone.patch\n$`, nil},
		{"missing patch: plan", []string{"plan", missingPatch}, 3, `^\S*patch/t.toml:9: driver.patches\[1\]: no file \S*0002-gone.patch\n$`, nil},
		{"missing patch: lock", []string{"lock", missingPatch}, 3, `^\S*patch/t.toml:9: driver.patches\[1\]: no file`, nil},
		{"missing fragment", []string{"plan", missingFrag}, 3, `^\S*frag/t.toml:5: kernel.fragments\[1\]: no built-in file configs/nosuch.config`, nil},
		{"missing keyring", []string{"lock", noKeyring}, 3, `^\S*nokeyring.toml:5: repo\[0\].keyring: cannot read \S*absent.gpg: no such file`, nil},
		{"unknown package", []string{"lock", lockRecipe(dir, "nosuchpkg", url, "good", a.keyring, "nosuchpkg")}, 3, `efi-stub: package nosuchpkg not found in good`, nil},
		{"missing lock: plan", []string{"plan", lockRecipe(dir, "unlocked", url, "good", a.keyring, "hello")}, 4, `unlocked.lock: no lock file: run .peerboot lock \S*/unlocked.toml.`, nil},
		{"inputs not fetched: build", []string{"build", unfetched}, 4, "stage kernel: input s.tar.xz is not in the store: run `peerboot fetch \\S*unfetched/t.toml`", nil},
		{"unreachable archive", []string{"lock", lockRecipe(dir, "dead", deadURL, "good", a.keyring, "hello")}, 5, `connection refused`, nil},
		{"InRelease signed by another key", []string{"lock", lockRecipe(dir, "strangers", url, "strangers", a.keyring, "hello")}, 6, `signed by key \S+, which the keyring does not hold`, nil},
		{"index not matching InRelease", []string{"lock", lockRecipe(dir, "tampered", url, "tampered", a.keyring, "hello")}, 6, `does not match InRelease`, nil},
		{"good archive", []string{"lock", lockRecipe(dir, "good", url, "good", a.keyring, "hello")}, 0, `^repo good: 1 packages`, nil},
		{"reports differ", []string{"report", "diff", "example:pass", "example:fail"}, 1, `^peerboot: reports differ: verdict pass -> fail`, nil},
		{"no QEMU: run", []string{"run", outDir}, 7, "^peerboot: run needs QEMU x86_64 \\(qemu-system-x86\\), which is missing: apt-get install qemu-system-x86", noTools},
		{"no QEMU: doctor --for run", []string{"doctor", "--for", "run"}, 7, `^peerboot: \d+ host tools missing for run: apt-get install .*qemu-system-x86`, noTools},
		{"stage fails", []string{"build", junkRecipe, "--stage", "kernel", "--cache", junkCache}, 8, `(?m)^peerboot: stage kernel: `, nil},
		{"no report: report show", []string{"report", "show"}, 2, `^peerboot: report show: want a report file, got 0 argument\(s\) \(example:fail shows a shipped one\)`, nil},
		{"self-test FAIL: report show", []string{"report", "show", "example:fail"}, 9, `^peerboot: example:fail: self-test verdict: fail`, nil},
		{"not a device: flash", []string{"flash", junk, junk, "--yes"}, 10, `not a block device`, nil},

		// The cases the first-hour review found exiting 1 ("a bug") or with a class
		// other than the table's.
		{"no such output: run", []string{"run", filepath.Join(dir, "nosuch")}, 2, `^peerboot: \S*nosuch: no such build output directory`, nil},
		{"key not found: sign", []string{"sign", outDir, "--artifact-key", filepath.Join(dir, "nosuch.pem")}, 2, `^peerboot: --artifact-key: key reference "file:\S*nosuch.pem": open \S*nosuch.pem: no such file`, nil},
		{"unknown key kind: sign", []string{"sign", outDir, "--artifact-key", "env:PB_TEST_UNSET_KEY"}, 2, `^peerboot: --artifact-key: key reference "env:PB_TEST_UNSET_KEY": environment variable PB_TEST_UNSET_KEY is not set`, nil},
		{"no such file: store import", []string{"store", "import", unfetched, "nosuch.run"}, 2, `^peerboot: store import: nosuch.run: no such file`, nil},
		{"garbage address: serve", []string{"serve", "--listen", "garbage"}, 2, `^peerboot: --listen: want HOST:PORT`, nil},
		{"bad port: serve", []string{"serve", "--listen", ":99999"}, 2, `^peerboot: --listen: want a port number`, nil},
		{"block size: flash", []string{"flash", "--block-size", "3", junk, junk}, 2, `^peerboot: flash: --block-size: want 4096 or more, got 3`, nil},
		{"block size not a multiple: flash", []string{"flash", "--block-size", "5000", junk, junk}, 2, `^peerboot: --block-size: want a positive multiple of 4096, got 5000`, nil},
		{"no jobs: build", []string{"build", "-j", "0", unfetched}, 2, `^peerboot: build: --jobs: want 1 or more, got 0`, nil},
		{"no jobs: fetch", []string{"fetch", "-j", "0", unfetched}, 2, `^peerboot: fetch: --jobs: want 1 or more, got 0`, nil},
		{"negative duration: store gc", []string{"store", "gc", "--older-than", "-5h"}, 2, `^peerboot: store gc: --older-than: want a duration of 0 or more, got -5h0m0s`, nil},
		{"zero timeout: run", []string{"run", "--timeout", "0s", outDir}, 2, `^peerboot: run: --timeout: want a positive duration, got 0s`, nil},
		{"no such output: verify", []string{"verify", filepath.Join(dir, "nosuch"), "--key", "cosign.pub"}, 2, `^peerboot: \S*nosuch: no such build output directory`, nil},
		{"typo: flsh", []string{"flsh"}, 2, `\(did you mean "flash"\?\)`, nil},
		{"typo: biuld", []string{"biuld"}, 2, `\(did you mean "build"\?\)`, nil},
		{"typo: doctr", []string{"doctr"}, 2, `\(did you mean "doctor"\?\)`, nil},
		{"typo: recipe shwo", []string{"recipe", "shwo"}, 2, `unknown command "shwo" for "peerboot recipe" \(did you mean "show"\?\)`, nil},
		{"no earlier build: plan --why", []string{"plan", "--why", unfetched}, 2, `^peerboot: no earlier build of recipe "t" in this store: nothing to compare with \(build it first\)\n$`, nil},
		{"no JSON form: plan --why --json", []string{"plan", "--why", "--json", unfetched}, 2, `^peerboot: plan: --why prints text only: leave out --json\n$`, nil},
		{"typo: build --stag", []string{"build", "--stag", "kernel"}, 2, `^peerboot: build: unknown flag: --stag \(did you mean --stage\?\); run .peerboot build --help.\n$`, nil},
		{"unknown flag: plan --frob", []string{"plan", "--frob"}, 2, `^peerboot: plan: unknown flag: --frob; run .peerboot plan --help.\n$`, nil},
		{"unknown shorthand: plan -x", []string{"plan", "-x"}, 2, `^peerboot: plan: unknown shorthand flag: 'x' in -x; run .peerboot plan --help.\n$`, nil},
		{"typo: help biuld", []string{"help", "biuld"}, 2, `^peerboot: unknown command "biuld" for "peerboot" \(did you mean "build"\?\); run .peerboot --help.\n$`, nil},
		{"typo: help store frob", []string{"help", "store", "frob"}, 2, `^peerboot: unknown command "frob" for "peerboot store"; run .peerboot store --help.\n$`, nil},
		{"--all and --for: doctor", []string{"doctor", "--all", "--for", "run"}, 2, `^peerboot: doctor: --all checks every use: leave out --for run, or --all\n$`, nil},
		{"bad --for: doctor", []string{"doctor", "--for", "bogus"}, 2, `^peerboot: --for: want build, sign, run or test, got "bogus"`, nil},
	}
	// Every class of the documented table has a case (130 is the interrupt below).
	for _, n := range exitcode.Names {
		found := n.Class == exitcode.Interrupted
		for _, c := range cases {
			found = found || c.code == int(n.Class)
		}
		if !found {
			t.Errorf("exit code %d (%s) has no case", n.Class, n.Name)
		}
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// A store each: a cached index would hide what the archive serves.
			_, errs, code := runEnv(t, c.env, append([]string{"--cache", filepath.Join(dir, fmt.Sprint("cache", i))}, c.args...)...)
			if code != c.code || !regexp.MustCompile(c.re).MatchString(errs) {
				t.Errorf("%v: exit %d, stderr:\n%s\nwant exit %d, stderr matching %s", c.args, code, errs, c.code, c.re)
			}
		})
	}
	// After the good lock, the same recipe plans (exit 0) and the stub is "not in the store yet";
	// a stale lock (the recipe's packages changed since) exits 4.
	out, errs, code := run(t, "--cache", filepath.Join(dir, "cache"), "plan", filepath.Join(dir, "good.toml"))
	if code != 0 || !strings.Contains(out, "not in the store yet: 3 pinned inputs") || !strings.Contains(out, "hello_1.0-1") {
		t.Errorf("plan after lock: exit %d\n%s%s", code, out, errs)
	}
	good, _ := os.ReadFile(filepath.Join(dir, "good.toml"))
	os.WriteFile(filepath.Join(dir, "good.toml"), bytes.Replace(good, []byte(`deb = "hello"`), []byte(`deb = "hello2"`), 1), 0o644)
	if _, errs, code := run(t, "--cache", filepath.Join(dir, "cache"), "plan", filepath.Join(dir, "good.toml")); code != 4 || !strings.Contains(errs, "good.lock is out of date with") {
		t.Errorf("plan with a stale lock: exit %d, want 4\n%s", code, errs)
	}

	// Ctrl-C while lock waits on the archive: 130, the shell's 128 + SIGINT.
	t.Run("interrupt", func(t *testing.T) {
		cmd := exec.Command(peerboot, "--cache", filepath.Join(dir, "cache"), "lock", lockRecipe(dir, "hang", url, "hang", a.keyring, "hello"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-a.hang:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Fatal("lock never asked for InRelease")
		}
		cmd.Process.Signal(syscall.SIGINT)
		err := cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != 130 || !strings.Contains(stderr.String(), "peerboot: interrupted") {
			t.Errorf("interrupted lock: exit %d (%v), stderr %q; want 130", code, err, stderr.String())
		}
	})
}
