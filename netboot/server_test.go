package netboot

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/output"
	"github.com/peerboot/peerboot/selftest"
)

const testInventory = `default = "default"
args = "loglevel=4"

[[node]]
mac = "52-54-00-12-34-56"
name = "rack1-n01"
recipe = "xeon-8gpu"
args = "pci=realloc"

[[node]]
host = "gpu-b-*"
recipe = "epyc-4gpu"
`

func inventoryEnv(t *testing.T, opt Options) *testEnv {
	inv, err := ParseInventory("inv.toml", []byte(testInventory))
	if err != nil {
		t.Fatal(err)
	}
	opt.Inventory = inv
	return newEnv(t, opt, "xeon-8gpu", "epyc-4gpu")
}

func TestBootScript(t *testing.T) {
	e := inventoryEnv(t, Options{})
	x := e.build(t, "xeon-8gpu")
	resp, body := e.get(t, "/boot.ipxe?mac=52:54:00:12:34:56&host=whatever&serial=SN1")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	base := e.http.URL
	for _, want := range []string{
		"#!ipxe\n",
		"node 52:54:00:12:34:56 (rack1-n01) -> recipe xeon-8gpu, build " + x.ID,
		"# sha256 " + x.Files["pxe/vmlinuz"] + "  vmlinuz\n",
		"# sha256 " + x.Files["pxe/initrd.img"] + "  initrd.img\n",
		"kernel " + base + "/builds/xeon-8gpu/" + x.ID + "/pxe/vmlinuz initrd=initrd.img console=ttyS0,115200 panic=-1 loglevel=4 pci=realloc peerboot.report_url=" + base + "/reports?node=52:54:00:12:34:56 peerboot.token=" + e.srv.Token(x.ID, "52:54:00:12:34:56") + " peerboot.nonce=",
		"initrd --name initrd.img " + base + "/builds/xeon-8gpu/" + x.ID + "/pxe/initrd.img\n",
		"boot\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("script lacks %q:\n%s", want, body)
		}
	}
	// The nonce: 80 hex digits naming this node and build (attest_test.go spends them),
	// unspent.
	if m := regexp.MustCompile(`peerboot\.nonce=([0-9a-f]{80})\n`).FindStringSubmatch(body); m == nil {
		t.Errorf("script lacks a nonce:\n%s", body)
	} else if build, _, ok := e.srv.openNonce(m[1], "52:54:00:12:34:56"); !ok || build != x.ID {
		t.Errorf("nonce %s: build %s, ok %t", m[1], build, ok)
	} else if _, err := e.store.LookupNonce(context.Background(), m[1], "52:54:00:12:34:56"); err != fleetdb.ErrNotFound {
		t.Errorf("a nonce just issued reads spent: %v", err)
	}
	n, err := e.store.Node(context.Background(), "SN1")
	if err != nil || n.MAC != "52:54:00:12:34:56" || n.Boots != 1 {
		t.Errorf("boot not recorded: %+v %v", n, err)
	}

	// Hostname glob, then the default.
	if _, body := e.get(t, "/boot.ipxe?mac=52:54:00:00:00:02&host=gpu-b-07"); !strings.Contains(body, "recipe epyc-4gpu") {
		t.Errorf("glob: %s", body)
	}
	if _, body := e.get(t, "/boot.ipxe?mac=52:54:00:00:00:03"); !strings.Contains(body, "recipe default") || strings.Contains(body, "pci=realloc") {
		t.Errorf("default: %s", body)
	}
	for _, bad := range []string{"/boot.ipxe", "/boot.ipxe?mac=nonsense"} {
		if resp, _ := e.get(t, bad); resp.StatusCode != 400 {
			t.Errorf("%s: %d, want 400", bad, resp.StatusCode)
		}
	}
	// A hostname or serial that is not a plain word is dropped, not written into the
	// script, and the node still boots.
	resp, body = e.get(t, "/boot.ipxe?mac=52:54:00:00:00:04&host=a%0Akernel%20evil&serial=To%20Be%20Filled")
	if resp.StatusCode != 200 || strings.Contains(body, "evil") || strings.Contains(body, "Filled") || !strings.Contains(e.log.String(), "ignoring unusable node fields") {
		t.Errorf("odd host and serial: %d\n%s", resp.StatusCode, body)
	}
}

func TestBootScriptNoDefault(t *testing.T) {
	inv, err := ParseInventory("inv.toml", []byte("[[node]]\nmac = \"52:54:00:12:34:56\"\nrecipe = \"default\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, Options{Inventory: inv})
	if resp, body := e.get(t, "/boot.ipxe?mac=52:54:00:00:00:09"); resp.StatusCode != 404 || !strings.Contains(body, "no inventory rule") {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
}

func TestServeFiles(t *testing.T) {
	e := newEnv(t, Options{})
	b := e.build(t, "default")
	want, _ := os.ReadFile(filepath.Join(b.Dir, "pxe", "initrd.img"))
	prefix := "/builds/default/" + b.ID + "/"

	resp, body := e.get(t, prefix+"pxe/initrd.img")
	if resp.StatusCode != 200 || body != string(want) || resp.ContentLength != int64(len(want)) || resp.Header.Get("ETag") != `"`+b.Files["pxe/initrd.img"]+`"` {
		t.Fatalf("full GET: %d, %d bytes, length %d, etag %s", resp.StatusCode, len(body), resp.ContentLength, resp.Header.Get("ETag"))
	}
	resp, body = e.get(t, prefix+"pxe/initrd.img", "Range", "bytes=1000-1999")
	if resp.StatusCode != 206 || body != string(want[1000:2000]) || resp.ContentLength != 1000 || resp.Header.Get("Content-Range") != "bytes 1000-1999/1048576" {
		t.Errorf("range: %d, %d bytes, %s", resp.StatusCode, len(body), resp.Header.Get("Content-Range"))
	}
	if resp, _ := e.get(t, prefix+"pxe/initrd.img", "Range", "bytes=2000000-"); resp.StatusCode != 416 {
		t.Errorf("range past the end: %d", resp.StatusCode)
	}
	if resp, body := e.get(t, "/builds/default/latest/manifest.json"); resp.StatusCode != 200 || !strings.Contains(body, `"recipe": "default"`) {
		t.Errorf("latest manifest: %d", resp.StatusCode)
	}
	if resp, body := e.get(t, "/uefi/boot.efi"); resp.StatusCode != 200 || !strings.HasPrefix(body, "MZ") {
		t.Errorf("UKI: %d %q", resp.StatusCode, body)
	}
	if resp, body := e.get(t, "/iso/boot.iso"); resp.StatusCode != 200 || body != "FAKE ISO of default" || resp.Header.Get("Content-Type") != "application/x-iso9660-image" || resp.Header.Get("X-Checksum-Sha256") != b.Files["peerboot.iso"] {
		t.Errorf("ISO: %d %q %s", resp.StatusCode, body, resp.Header.Get("Content-Type"))
	}
	if resp, body := e.get(t, "/iso/default.iso", "Range", "bytes=5-7"); resp.StatusCode != 206 || body != "ISO" {
		t.Errorf("ISO range (what a BMC reads): %d %q", resp.StatusCode, body)
	}
	for _, p := range []string{"/iso/default.img", "/iso/nope.iso"} {
		if resp, _ := e.get(t, p); resp.StatusCode != 404 {
			t.Errorf("%s: %d, want 404", p, resp.StatusCode)
		}
	}
	if resp, _ := e.get(t, "/builds/default/0123456789abcdef/pxe/vmlinuz"); resp.StatusCode != 410 {
		t.Errorf("stale build: %d, want 410", resp.StatusCode)
	}
	if resp, _ := e.get(t, "/builds/nope/latest/pxe/vmlinuz"); resp.StatusCode != 404 {
		t.Errorf("unknown recipe: %d", resp.StatusCode)
	}
}

// Nothing outside the listed outputs is served: traversal, hidden files, unlisted
// files and symlinks that leave the directory are refused, and each refusal is logged.
func TestServeRefusals(t *testing.T) {
	e := newEnv(t, Options{})
	b := e.build(t, "default")
	secret := filepath.Join(e.out, "secret.txt")
	os.WriteFile(secret, []byte("outside"), 0o644)
	os.WriteFile(filepath.Join(b.Dir, ".hidden"), []byte("hidden"), 0o644)
	os.WriteFile(filepath.Join(b.Dir, "unlisted"), []byte("unlisted"), 0o644)
	// A listed file replaced by a symlink out of the tree after the build was loaded.
	os.Remove(filepath.Join(b.Dir, "pxe", "vmlinuz"))
	if err := os.Symlink(secret, filepath.Join(b.Dir, "pxe", "vmlinuz")); err != nil {
		t.Fatal(err)
	}
	os.Symlink("../../secret.txt", filepath.Join(b.Dir, "pxe", "rel"))
	// List it, as a tampered SHA256SUMS would: the server reloads the changed build.
	sums, _ := os.ReadFile(filepath.Join(b.Dir, "SHA256SUMS"))
	list, err := output.ParseSums(sums)
	if err != nil {
		t.Fatal(err)
	}
	list = append(list, output.Sum{Path: "pxe/rel", SHA256: strings.Repeat("0", 64)})
	os.WriteFile(filepath.Join(b.Dir, "SHA256SUMS"), output.FormatSums(list), 0o644)
	b = e.build(t, "default")
	if _, ok := b.Files["pxe/rel"]; !ok {
		t.Fatal("pxe/rel not listed after the reload")
	}
	prefix := "/builds/default/" + b.ID + "/"
	cases := map[string]int{
		prefix + "pxe/vmlinuz":                     403, // symlink to an absolute path outside
		prefix + "pxe/rel":                         403, // relative symlink climbing out
		prefix + "..%2F..%2Fsecret.txt":            403,
		prefix + "pxe%2F..%2F..%2F..%2Fsecret.txt": 403,
		prefix + ".hidden":                         403,
		prefix + "pxe/.hidden":                     403,
		prefix + "unlisted":                        404,
		prefix + "%2Fetc%2Fpasswd":                 403,
		prefix + "pxe%5C..%5Cmanifest.json":        403,
	}
	for path, want := range cases {
		resp, body := e.get(t, path)
		if resp.StatusCode != want || strings.Contains(body, "outside") {
			t.Errorf("%s: %d, want %d (%.80q)", path, resp.StatusCode, want, body)
		}
	}
	// The mux cleans a literal ../ before the handler sees it: still nothing outside.
	for _, raw := range []string{"/builds/default/" + b.ID + "/../../../secret.txt", "/builds/../secret.txt"} {
		req, _ := http.NewRequest("GET", e.http.URL+raw, nil)
		req.URL.Opaque = raw
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Errorf("%s served", raw)
		}
	}
	if n := strings.Count(e.log.String(), "file refused"); n < len(cases) {
		t.Errorf("%d refusals logged, want %d:\n%s", n, len(cases), e.log.String())
	}
}

func TestBuildReload(t *testing.T) {
	e := newEnv(t, Options{})
	old := e.build(t, "default")
	// A rebuild swaps the directory: a new one with a different initrd.
	next := filepath.Join(e.out, "next")
	fakeBuild(t, next, "default", 2048)
	if err := os.Rename(old.Dir, filepath.Join(e.out, "old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, old.Dir); err != nil {
		t.Fatal(err)
	}
	cur := e.build(t, "default")
	if cur.ID == old.ID {
		t.Fatal("build id unchanged after a rebuild")
	}
	if resp, _ := e.get(t, "/builds/default/"+old.ID+"/pxe/initrd.img"); resp.StatusCode != 410 {
		t.Errorf("old build: %d, want 410", resp.StatusCode)
	}
	if resp, body := e.get(t, "/builds/default/"+cur.ID+"/pxe/initrd.img"); resp.StatusCode != 200 || len(body) != 2048 {
		t.Errorf("new build: %d, %d bytes", resp.StatusCode, len(body))
	}
}

func reportBody(t testing.TB, p DemoPlatform, boot int, broken bool) []byte {
	r := DemoReport(p, boot, broken)
	r.Recipe.Name = "default"
	b, err := selftest.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCollector(t *testing.T) {
	e := newEnv(t, Options{MaxReportBytes: 256 << 10, RateBurst: 4})
	build := e.build(t, "default").ID
	tok := func(node string) string { return e.srv.Token(build, node) }
	good := reportBody(t, Epyc4GPU, 0, false)
	other := reportBody(t, Epyc4GPU, 1, false)
	v1 := []byte(strings.Replace(string(good), `"schema": 2`, `"schema": 1`, 1))
	foreign := reportBody(t, Epyc4GPU, 2, false)
	foreign = []byte(strings.Replace(string(foreign), `"name": "default"`, `"name": "xeon-8gpu"`, 1))
	badVerdict := []byte(strings.Replace(string(reportBody(t, Epyc4GPU, 3, false)), `"verdict": "pass"`, `"verdict": "maybe"`, 1))
	big := append([]byte(`{"schema":2,"x":"`), make([]byte, 300<<10)...)
	// One character changed; replacing the last with a fixed one would leave it equal
	// whenever the token already ends in that character.
	n1 := tok("52:54:00:00:00:01")
	last := "0"
	if strings.HasSuffix(n1, "0") {
		last = "1"
	}
	wrong := n1[:len(n1)-1] + last
	// The old token format: an HMAC of the build alone, good for any node.
	m := hmac.New(sha256.New, e.srv.secret)
	io.WriteString(m, "peerboot report token\x00"+build)
	buildOnly := build + "." + hex.EncodeToString(m.Sum(nil))[:32]
	tests := []struct {
		name, path, token string
		body              []byte
		status            int
		log               string
	}{
		{"good", "/reports?node=52:54:00:00:00:01", n1, good, 201, "report stored"},
		// Idempotent: a node retrying (its answer lost, or sent to another replica) is
		// told its report is in; another node replaying the body is refused.
		{"retry", "/reports?node=52:54:00:00:00:01", n1, good, 200, `report already stored (a retry)" id=1`},
		{"replay from another node", "/reports?node=52:54:00:00:00:02", tok("52:54:00:00:00:02"), good, 409, "replayed"},
		{"no token", "/reports?node=52:54:00:00:00:01", "", other, 401, "no token"},
		{"wrong token", "/reports?node=52:54:00:00:00:01", wrong, other, 403, "not one this server issued"},
		{"garbage token", "/reports?node=52:54:00:00:00:01", "x", other, 403, "not one this server issued"},
		// Issue 15 item 4: one node's token does not file a report for another node,
		// nor under an invented name, nor without ?node=; a build-wide token is gone.
		{"another node's token", "/reports?node=52:54:00:00:00:05", n1, other, 403, "issued to node 52:54:00:00:00:05"},
		{"invented node", "/reports?node=made-up-1", n1, other, 403, "issued to node made-up-1"},
		{"no node", "/reports", n1, other, 403, "issued to node ip:127.0.0.1"},
		{"build-only token", "/reports?node=52:54:00:00:00:01", buildOnly, other, 403, "not one this server issued"},
		{"oversized", "/reports?node=52:54:00:00:00:03", tok("52:54:00:00:00:03"), big, 413, "limit is"},
		{"malformed", "/reports?node=52:54:00:00:00:03", tok("52:54:00:00:00:03"), []byte(`{"schema": 2, "verdict": "pa`), 400, "not JSON"},
		// Issue 15 item 8: bytes after the report were stored and served back.
		{"trailing bytes", "/reports?node=52:54:00:00:00:06", tok("52:54:00:00:00:06"), append(append([]byte{}, other...), "<script>alert(1)</script>"...), 400, "bytes follow the report"},
		{"second value", "/reports?node=52:54:00:00:00:06", tok("52:54:00:00:00:06"), append(append([]byte{}, other...), `{"a":1}`...), 400, "bytes follow the report"},
		{"not a report", "/reports?node=52:54:00:00:00:03", tok("52:54:00:00:00:03"), []byte(`[1,2]`), 422, "want a JSON object"},
		{"old schema", "/reports?node=52:54:00:00:00:04", tok("52:54:00:00:00:04"), v1, 422, "schema 1"},
		{"wrong recipe", "/reports?node=52:54:00:00:00:04", tok("52:54:00:00:00:04"), foreign, 422, "token is for"},
		{"bad verdict", "/reports?node=52:54:00:00:00:04", tok("52:54:00:00:00:04"), badVerdict, 422, `want \"pass\" or \"fail\"`},
		{"bad node", "/reports?node=a%20b", n1, other, 400, "node:"},
		{"second good", "/reports?node=52-54-00-00-00-01", n1, append(append([]byte{}, other...), " \n\t"...), 201, "report stored"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(e.log.String())
			resp, body := e.post(t, tt.path, tt.token, tt.body)
			if resp.StatusCode != tt.status {
				t.Fatalf("%d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			logged := e.log.String()[before:]
			if !strings.Contains(logged, tt.log) {
				t.Errorf("log %q lacks %q", logged, tt.log)
			}
			if tt.status >= 400 && !strings.Contains(logged, fmt.Sprintf("status=%d", tt.status)) {
				t.Errorf("refusal not logged with its status: %q", logged)
			}
		})
	}
	if n, _ := e.store.Count(context.Background()); n != 2 {
		t.Errorf("%d reports stored, want 2", n)
	}
	hist, _ := e.store.Reports(context.Background(), "52:54:00:00:00:01", 0)
	if len(hist) != 2 || hist[0].Recipe != "default" || hist[0].Build != e.build(t, "default").ID {
		t.Errorf("history %+v", hist)
	}
	// Nothing a refused POST named became a node.
	nodes, _ := e.store.Nodes(context.Background())
	if len(nodes) != 1 {
		t.Errorf("%d nodes after the refusals, want 1: %+v", len(nodes), nodes)
	}
}

func TestCollectorRateLimit(t *testing.T) {
	e := newEnv(t, Options{RateBurst: 2})
	build := e.build(t, "default").ID
	for i := 0; i < 3; i++ {
		resp, body := e.post(t, "/reports?node=n1", e.srv.Token(build, "n1"), reportBody(t, Epyc4GPU, 10+i, false))
		want := 201
		if i == 2 {
			want = 429
		}
		if resp.StatusCode != want {
			t.Fatalf("post %d: %d %s", i, resp.StatusCode, body)
		}
		if want == 429 && resp.Header.Get("Retry-After") == "" {
			t.Error("no Retry-After")
		}
	}
	// Another node has its own bucket.
	if resp, _ := e.post(t, "/reports?node=n2", e.srv.Token(build, "n2"), reportBody(t, Epyc4GPU, 20, false)); resp.StatusCode != 201 {
		t.Errorf("other node: %d", resp.StatusCode)
	}
	if !strings.Contains(e.log.String(), "too often") {
		t.Error("429 not logged")
	}
}

// TestCollectorSourceRateLimit (issue 15 item 4): one client address inventing node
// names, each with a valid token (anyone may fetch any node's script), is held to the
// per-address bucket, whatever names it uses; before, 50 made-up names stored 50
// reports at a burst of one per node.
func TestCollectorSourceRateLimit(t *testing.T) {
	e := newEnv(t, Options{RateBurst: 1, SourceBurst: 5, SourceRateEvery: time.Hour})
	build := e.build(t, "default").ID
	stored, limited := 0, 0
	for i := 0; i < 50; i++ {
		node := fmt.Sprintf("made-up-%d", i)
		resp, body := e.post(t, "/reports?node="+node, e.srv.Token(build, node), reportBody(t, Epyc4GPU, 30+i, false))
		switch resp.StatusCode {
		case 201:
			stored++
		case 429:
			limited++
			if !strings.Contains(body, "127.0.0.1 sends reports too often") || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("429 without the address or Retry-After: %s", body)
			}
		default:
			t.Fatalf("post %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if stored != 5 || limited != 45 {
		t.Errorf("%d stored, %d limited; want 5 and 45", stored, limited)
	}
	if n, _ := e.store.Count(context.Background()); n != 5 {
		t.Errorf("%d reports in the store, want 5", n)
	}
}

func TestStaticToken(t *testing.T) {
	e := newEnv(t, Options{StaticTokens: []string{"rack-token-1"}})
	if resp, body := e.post(t, "/reports", "rack-token-1", reportBody(t, Epyc4GPU, 0, false)); resp.StatusCode != 201 || !strings.Contains(body, `"node":"ip:127.0.0.1"`) {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
}
