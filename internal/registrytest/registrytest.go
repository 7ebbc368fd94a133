// Package registrytest starts Debian's docker-registry (the CNCF distribution
// registry) on 127.0.0.1 for a test, with its storage in a temporary directory
// the test can tamper with.
package registrytest

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/testguard"
)

// Server is one running registry.
type Server struct {
	Host    string // 127.0.0.1:PORT
	Storage string // the filesystem driver's root
}

// Start runs a registry until the test ends (skipped, or failed on CI, without
// the docker-registry package).
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		testguard.Skip(t, "docker-registry not installed (apt-get install docker-registry; scripts/deps.sh does)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	storage := filepath.Join(dir, "storage")
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
http:
  addr: %s
`, storage, host)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := exec.Command(bin, "serve", cfgPath)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("docker-registry log:\n%s", logs.String())
		}
	})
	for i := 0; ; i++ {
		resp, err := http.Get("http://" + host + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if i > 100 {
			t.Fatalf("docker-registry did not come up on %s: %v\n%s", host, err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return &Server{Host: host, Storage: storage}
}

// BlobPath is where the filesystem driver keeps a blob's bytes.
func (s *Server) BlobPath(sha string) string {
	return filepath.Join(s.Storage, "docker/registry/v2/blobs/sha256", sha[:2], sha, "data")
}

// ManifestRevisions lists the digests (hex) of every manifest stored in repo,
// tagged or not.
func (s *Server) ManifestRevisions(t testing.TB, repo string) []string {
	t.Helper()
	dir := filepath.Join(s.Storage, "docker/registry/v2/repositories", repo, "_manifests/revisions/sha256")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}
