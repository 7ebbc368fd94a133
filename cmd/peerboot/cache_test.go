package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/sign"
)

// The remote cache's settings are checked before anything is built or asked
// of a registry: a fetch without a key to trust, a push without the key to
// sign with, a tag where a repository belongs, a key that cannot be read are
// each a usage error (exit 2) naming what is missing.
func TestCacheFlagErrors(t *testing.T) {
	const recipePath = "../../recipes/default.toml"
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := sign.PublicKeyPEM(k.Public())
	if err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(t.TempDir(), "cosign.pub")
	os.WriteFile(pub, pem, 0o644)
	t.Setenv(envCacheFrom, "")
	t.Setenv(envCacheTo, "")
	for _, c := range []struct {
		name string
		args []string
		env  string // PEERBOOT_CACHE_FROM
		want string
	}{
		{"fetch without a key", []string{"build", "--cache-from", "oci://127.0.0.1:1/peerboot/stages"}, "", "needs a key to verify them with"},
		{"fetch from the environment without a key", []string{"build"}, "oci://127.0.0.1:1/peerboot/stages", "needs a key to verify them with"},
		{"push without the artifact key", []string{"build", "--cache-to", "oci://127.0.0.1:1/peerboot/stages"}, "", "needs the artifact key to sign them with"},
		{"a tag for a repository", []string{"build", "--cache-from", "oci://127.0.0.1:1/peerboot/stages:latest", "--cache-key", pub}, "", "names a tag or digest"},
		{"a key that is not there", []string{"build", "--cache-from", "oci://127.0.0.1:1/peerboot/stages", "--cache-key", "/nonexistent/cosign.pub"}, "", "--cache-key"},
		{"a public key to sign with", []string{"build", "--cache-to", "oci://127.0.0.1:1/peerboot/stages", "--artifact-key", pub}, "", "--artifact-key"},
		{"store push with nowhere to push", []string{"store", "push"}, "", "no cache to push to"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(envCacheFrom, c.env)
			root := rootCmd()
			var out, errs bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&errs)
			args := append([]string{}, c.args...)
			if args[0] == "store" {
				args = append(args[:2], recipePath)
			} else {
				args = append([]string{args[0], recipePath}, args[1:]...)
			}
			root.SetArgs(append(args, "--cache", t.TempDir()+"/store"))
			err := root.ExecuteContext(context.Background())
			if code := exitcode.Of(err); code != int(exitcode.Usage) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v: exit %d (%v), want %d naming %q", c.args, code, err, exitcode.Usage, c.want)
			}
			if out.Len() > 0 {
				t.Errorf("printed %q before refusing", out.String())
			}
		})
	}
}
