package netboot

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/peerboot/peerboot/internal/testguard"
)

// A PostgreSQL server for the store tests: Debian's postgresql package, a cluster in a
// temporary directory, listening only on a unix socket there. Started on first use and
// stopped by TestMain.
var pg struct {
	once sync.Once
	dir  string // data in dir/data, the socket in dir
	err  error
	run  func(name string, args ...string) *exec.Cmd
	n    atomic.Int64
}

const pgBin = "/usr/lib/postgresql/15/bin"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	code := m.Run()
	if pg.dir != "" {
		pg.run(filepath.Join(pgBin, "pg_ctl"), "-D", filepath.Join(pg.dir, "data"), "-m", "immediate", "-w", "stop").Run()
		os.RemoveAll(pg.dir)
	}
	os.Exit(code)
}

// postgresDSN returns the DSN of a fresh, empty database, skipping the test when
// PostgreSQL is not installed (scripts/deps.sh installs it for `make test`).
func postgresDSN(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(pgBin, "initdb")); err != nil {
		if os.Getenv("PEERBOOT_REQUIRE_POSTGRES") != "" {
			t.Fatalf("PostgreSQL 15 is not installed (%v): apt-get install postgresql", err)
		}
		testguard.Skipf(t, "PostgreSQL 15 is not installed (%v): make deps installs postgresql", err)
	}
	pg.once.Do(func() { pg.err = startPostgres() })
	if pg.err != nil {
		t.Fatalf("starting PostgreSQL: %v", pg.err)
	}
	name := fmt.Sprintf("t%d", pg.n.Add(1))
	admin, err := sql.Open("pgx", pgDSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("creating database %s: %v", name, err)
	}
	return pgDSN(name)
}

func pgDSN(db string) string {
	return fmt.Sprintf("host=%s port=5432 user=postgres dbname=%s sslmode=disable", pg.dir, db)
}

// startPostgres makes a cluster owned by a non-root user (initdb refuses root) and
// starts it with no TCP listener.
func startPostgres() error {
	dir, err := os.MkdirTemp("", "peerboot-pg-")
	if err != nil {
		return err
	}
	pg.dir = dir
	pg.run = exec.Command
	if os.Getuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("running as root needs the postgres user to own the cluster: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return err
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			return err
		}
		pg.run = func(name string, args ...string) *exec.Cmd {
			return exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := pg.run(filepath.Join(pgBin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "--no-sync").CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	opts := fmt.Sprintf("-k %s -c listen_addresses='' -F", dir)
	if out, err := pg.run(filepath.Join(pgBin, "pg_ctl"), "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		return fmt.Errorf("pg_ctl start: %w\n%s\n%s", err, out, log)
	}
	return nil
}
