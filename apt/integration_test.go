package apt

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/testguard"
)

// TestRealBookwormContrib loads the real bookworm main and contrib indexes from the
// machine's configured mirror. CI has network, so an unreachable mirror is a
// failure unless PEERBOOT_OFFLINE=1 says this machine is offline on purpose
// (and even then under CI=true).
func TestRealBookwormContrib(t *testing.T) {
	testguard.Short(t, "loads the live bookworm indexes")
	base, err := SystemMirror("/etc/apt", "bookworm")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := Client{HTTP: &http.Client{Timeout: 2 * time.Minute}}
	r := Repo{Name: "bookworm", BaseURL: base, Suite: "bookworm", Components: []string{"main", "contrib"},
		Arch: "amd64", Keyring: "/usr/share/keyrings/debian-archive-keyring.gpg"}
	idx, err := c.LoadIndex(ctx, r)
	if err != nil {
		var ue *url.Error
		var ne net.Error
		if os.Getenv("PEERBOOT_OFFLINE") == "1" && (errors.As(err, &ue) || errors.As(err, &ne)) {
			testguard.Skipf(t, "mirror unreachable and PEERBOOT_OFFLINE=1: %v", err)
		}
		t.Fatal(err)
	}
	if len(idx.Packages) < 100 || idx.Date.IsZero() || len(idx.InReleaseSHA256) != 64 {
		t.Fatalf("implausible index: %d packages, date %v, InRelease sha256 %q", len(idx.Packages), idx.Date, idx.InReleaseSHA256)
	}
	// main is loaded too: the package's Depends (debhelper-compat) live there.
	res, err := Resolve([]*Index{idx}, []Request{{Name: "nvidia-open-kernel-source"}}, map[string]bool{}, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	found, compat := false, false
	for _, p := range res {
		// debhelper-compat (= 13) is virtual, met by debhelper's versioned Provides.
		compat = compat || p.Name == "debhelper" && strings.Contains(strings.Join(p.RequiredBy, " "), "nvidia-open-kernel-source")
		if p.Name == "nvidia-open-kernel-source" {
			found = true
			if !strings.HasPrefix(p.Filename, "pool/contrib/") || len(p.SHA256) != 64 || p.Size <= 0 {
				t.Errorf("implausible package %+v", p.Package)
			}
		}
		t.Logf("%s %s %s <- %v", p.Name, p.Version, p.Filename, p.RequiredBy)
	}
	if !found || !compat {
		t.Fatalf("resolution lacks nvidia-open-kernel-source (%v) or debhelper required by it (%v)", found, compat)
	}
}
