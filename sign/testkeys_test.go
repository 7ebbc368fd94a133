package sign

import (
	"crypto/x509"
	"testing"
	"time"
)

// TestTestKeyCertsValidNow: the certificates keys init writes are usable the
// moment they are written. A verifier that checks the validity period (Go's
// crypto/x509, openssl verify) refuses a certificate whose NotBefore is still
// ahead, so a key set made a minute ago must verify now, on a machine whose
// clock runs a few minutes behind (a VM's), and for the years the test keys
// are meant to last.
func TestTestKeyCertsValidNow(t *testing.T) {
	now := time.Now()
	for _, name := range []string{DBCertFile, ModuleCertFile} {
		cert, err := LoadCert(key(name))
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AddCert(cert) // self-signed: its own trust anchor, as when enrolled in db
		for _, c := range []struct {
			when time.Time
			why  string
		}{
			{now, "now"},
			{now.Add(-10 * time.Minute), "on a clock ten minutes behind"},
			{now.AddDate(testKeyValidYears-1, 0, 0), "in the test keys' last year"},
		} {
			_, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: c.when,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning}})
			if err != nil {
				t.Errorf("%s (valid %s to %s) does not verify %s: %v", name,
					cert.NotBefore.Format(time.RFC3339), cert.NotAfter.Format(time.RFC3339), c.why, err)
			}
		}
	}
}
