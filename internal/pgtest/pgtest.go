// Package pgtest is the PostgreSQL server of the tests that need one (the
// report database's, netboot's replicas): Debian's postgresql package, a
// cluster in a temporary directory listening only on a unix socket there,
// started on first use and stopped by Stop from the package's TestMain.
package pgtest

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

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/peerboot/peerboot/internal/testguard"
)

// Bin is where Debian's postgresql-15 puts initdb and pg_ctl.
const Bin = "/usr/lib/postgresql/15/bin"

// server is one test binary's cluster; a test binary is one process, so this
// is its state, not the module's.
var server struct {
	once sync.Once
	dir  string // data in dir/data, the socket in dir
	err  error
	run  func(name string, args ...string) *exec.Cmd
	n    atomic.Int64
}

// DSN returns the DSN of a fresh, empty database, skipping the test when
// PostgreSQL is not installed (scripts/deps.sh installs it for `make test`;
// under CI, or with PEERBOOT_REQUIRE_POSTGRES set, that fails instead).
func DSN(t testing.TB) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(Bin, "initdb")); err != nil {
		if os.Getenv("PEERBOOT_REQUIRE_POSTGRES") != "" {
			t.Fatalf("PostgreSQL 15 is not installed (%v): apt-get install postgresql", err)
		}
		testguard.Skipf(t, "PostgreSQL 15 is not installed (%v): make deps installs postgresql", err)
	}
	server.once.Do(func() { server.err = start() })
	if server.err != nil {
		t.Fatalf("starting PostgreSQL: %v", server.err)
	}
	name := fmt.Sprintf("t%d", server.n.Add(1))
	admin, err := sql.Open("pgx", dsn("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("creating database %s: %v", name, err)
	}
	return dsn(name)
}

// Stop stops the cluster, if a test started one, and deletes it.
func Stop() {
	if server.dir == "" {
		return
	}
	server.run(filepath.Join(Bin, "pg_ctl"), "-D", filepath.Join(server.dir, "data"), "-m", "immediate", "-w", "stop").Run()
	os.RemoveAll(server.dir)
}

func dsn(db string) string {
	return fmt.Sprintf("host=%s port=5432 user=postgres dbname=%s sslmode=disable", server.dir, db)
}

// start makes a cluster owned by a non-root user (initdb refuses root) and
// starts it with no TCP listener.
func start() error {
	dir, err := os.MkdirTemp("", "peerboot-pg-")
	if err != nil {
		return err
	}
	server.dir = dir
	server.run = exec.Command
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
		server.run = func(name string, args ...string) *exec.Cmd {
			return exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := server.run(filepath.Join(Bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "--no-sync").CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	opts := fmt.Sprintf("-k %s -c listen_addresses='' -F", dir)
	if out, err := server.run(filepath.Join(Bin, "pg_ctl"), "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		return fmt.Errorf("pg_ctl start: %w\n%s\n%s", err, out, log)
	}
	return nil
}
