package netboot

import (
	"os"
	"testing"

	"github.com/peerboot/peerboot/internal/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	code := m.Run()
	pgtest.Stop()
	os.Exit(code)
}

// postgresDSN returns the DSN of a fresh, empty database (pgtest.DSN).
func postgresDSN(t *testing.T) string {
	t.Helper()
	return pgtest.DSN(t)
}
