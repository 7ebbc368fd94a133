package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

// A suite whose InRelease expired (as sid's does on a mirror that stopped syncing):
// refused by default, read with check_valid_until = false (with a warning and the
// dates in the lock), never read by fetch; and a broken signature refused whatever
// the setting.
func TestCheckValidUntil(t *testing.T) {
	key, err := openpgp.NewEntity("archive", "", "archive@example.invalid", &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA})
	if err != nil {
		t.Fatal(err)
	}
	deb := []byte("not really a deb, but pinned by its sha256\n")
	debSum := sha256.Sum256(deb)
	packages := fmt.Sprintf("Package: hello\nVersion: 1.0-1\nArchitecture: amd64\nFilename: pool/main/h/hello/hello_1.0-1_amd64.deb\nSize: %d\nSHA256: %x\n\n", len(deb), debSum)
	var mu sync.Mutex
	files := map[string][]byte{"/debian/pool/main/h/hello/hello_1.0-1_amd64.deb": deb}
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, r.URL.Path)
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	}))
	defer srv.Close()
	publish := func(suite, date string, tamper bool) {
		sum := sha256.Sum256([]byte(packages))
		text := fmt.Sprintf("Origin: Test\nSuite: %s\nCodename: %s\nDate: %s\nValid-Until: Fri, 06 Nov 2026 08:08:01 UTC\nComponents: main\nSHA256:\n %x %d main/binary-amd64/Packages\n",
			suite, suite, date, sum, len(packages))
		var buf bytes.Buffer
		w, err := clearsign.Encode(&buf, key.PrivateKey, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, text)
		w.Close()
		ir := buf.Bytes()
		if tamper {
			ir = bytes.Replace(ir, []byte("Origin: Test"), []byte("Origin: Tesu"), 1)
		}
		mu.Lock()
		files["/debian/dists/"+suite+"/InRelease"] = ir
		files["/debian/dists/"+suite+"/main/binary-amd64/Packages"] = []byte(packages)
		mu.Unlock()
	}
	publish("sid", "Fri, 30 Oct 2026 08:08:01 UTC", false)
	publish("broken", "Fri, 30 Oct 2026 08:08:01 UTC", true)
	var pub bytes.Buffer
	key.Serialize(&pub)
	dir := t.TempDir()
	keyring := filepath.Join(dir, "archive.gpg")
	os.WriteFile(keyring, pub.Bytes(), 0o644)

	// The kernel and driver sources are local files, so fetch reaches every input.
	src := []byte("source tarball stand-in\n")
	srcPath := filepath.Join(dir, "src.tar.xz")
	os.WriteFile(srcPath, src, 0o644)
	recipeFor := func(name, suite, extra string) string {
		p := lockRecipe(dir, name, srv.URL+"/debian", suite, keyring, "hello")
		b, _ := os.ReadFile(p)
		b = bytes.Replace(b, []byte("url = "), []byte(extra+"url = "), 1)
		for _, u := range []string{"https://example.invalid/linux.tar.xz", "https://example.invalid/nvidia.tar.xz"} {
			b = bytes.ReplaceAll(b, []byte(u), []byte("file://"+srcPath))
		}
		b = bytes.ReplaceAll(b, []byte(strings.Repeat("a", 64)), []byte(fmt.Sprintf("%x", sha256.Sum256(src))))
		os.WriteFile(p, b, 0o644)
		return p
	}
	cache := filepath.Join(dir, "cache")

	// Default: apt's Check-Valid-Until, refused as an integrity failure.
	_, errs, code := run(t, "--cache", cache, "lock", recipeFor("strict", "sid", ""))
	if code != 6 || !strings.Contains(errs, "expired at Fri, 06 Nov 2026 08:08:01 UTC (Valid-Until)") || !strings.Contains(errs, "check_valid_until = false") {
		t.Errorf("expired index, checked: exit %d\n%s", code, errs)
	}
	// Broken signature: refused whatever the setting.
	for _, extra := range []string{"", "check_valid_until = false\n"} {
		_, errs, code = run(t, "--cache", cache, "lock", recipeFor("broken", "broken", extra))
		if code != 6 || !strings.Contains(errs, "bad signature from key") {
			t.Errorf("broken signature (%q): exit %d\n%s", extra, code, errs)
		}
	}
	// check_valid_until = false: read, warned about with both dates, recorded in the lock.
	lax := recipeFor("lax", "sid", "check_valid_until = false\n")
	_, errs, code = run(t, "--cache", cache, "lock", lax)
	if code != 0 || !strings.Contains(errs, "warning: repo sid: InRelease expired at Fri, 06 Nov 2026 08:08:01 UTC (Valid-Until), dated Fri, 30 Oct 2026 08:08:01 UTC") {
		t.Fatalf("expired index, check_valid_until = false: exit %d\n%s", code, errs)
	}
	lockFile := strings.TrimSuffix(lax, ".toml") + ".lock"
	first, _ := os.ReadFile(lockFile)
	for _, want := range []string{"[[index]]", `repo = "sid"`, `date = "2026-10-30T08:08:01Z"`, `valid_until = "2026-11-06T08:08:01Z"`, "expired = true", `package = "hello"`} {
		if !bytes.Contains(first, []byte(want)) {
			t.Errorf("lock lacks %q:\n%s", want, first)
		}
	}
	// The archive republishes (new Date, same packages): the pins did not move, so
	// neither does the lock, and --check agrees.
	publish("sid", "Sat, 31 Oct 2026 08:08:01 UTC", false)
	if out, errs, code := run(t, "--cache", cache, "lock", lax); code != 0 || !strings.Contains(out, "unchanged") {
		t.Errorf("re-lock: exit %d\n%s%s", code, out, errs)
	}
	if again, _ := os.ReadFile(lockFile); !bytes.Equal(again, first) {
		t.Errorf("re-lock with the same pins rewrote the lock:\n%s", again)
	}
	// fetch needs no index at all: the archive stops serving InRelease, fetch still works.
	mu.Lock()
	delete(files, "/debian/dists/sid/InRelease")
	asked = nil
	mu.Unlock()
	if out, errs, code := run(t, "--cache", cache, "fetch", lax); code != 0 {
		t.Fatalf("fetch: exit %d\n%s%s", code, out, errs)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range asked {
		if strings.Contains(p, "/dists/") {
			t.Errorf("fetch asked for an index: %s", p)
		}
	}
	if len(asked) != 1 || !strings.HasSuffix(asked[0], "hello_1.0-1_amd64.deb") {
		t.Errorf("fetch asked for %q, want only the pinned .deb", asked)
	}
}
