package sqldb

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "modernc.org/sqlite"             // database/sql driver "sqlite", no cgo

	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/selftest"
)

// dialect is what differs between SQLite and PostgreSQL. Queries use $N placeholders,
// which both accept, and ON CONFLICT / RETURNING, which both implement.
type dialect struct {
	name   string
	id     string // an auto-numbered primary key column type
	blob   string
	lockTx string // run first in a migration transaction to keep two servers apart
	// serialize: one writer at a time, in Go, rather than SQLite's busy-wait.
	serialize bool
}

var (
	sqliteDialect   = dialect{name: "sqlite", id: "INTEGER PRIMARY KEY AUTOINCREMENT", blob: "BLOB", serialize: true}
	postgresDialect = dialect{name: "postgres", id: "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", blob: "BYTEA", lockTx: "SELECT pg_advisory_xact_lock(727265)"}
)

var _ fleetdb.Store = (*DB)(nil)

// migrations are applied in order, each in its own transaction, and recorded in
// schema_migrations; never edit a released one, append a new one. {{ID}} and {{BLOB}}
// become the dialect's types.
var migrations = []string{
	// 1: nodes, reports (unique by sha256: a replay is refused by the database itself), boots.
	`CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE nodes (
	id TEXT PRIMARY KEY,
	mac TEXT NOT NULL DEFAULT '',
	hostname TEXT NOT NULL DEFAULT '',
	serial TEXT NOT NULL DEFAULT '',
	first_seen BIGINT NOT NULL,
	last_seen BIGINT NOT NULL,
	boots BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE reports (
	id {{ID}},
	node_id TEXT NOT NULL REFERENCES nodes (id),
	received_at BIGINT NOT NULL,
	recipe TEXT NOT NULL,
	build TEXT NOT NULL,
	verdict TEXT NOT NULL,
	sha256 TEXT NOT NULL UNIQUE,
	remote TEXT NOT NULL,
	body {{BLOB}} NOT NULL
);
CREATE INDEX reports_by_node ON reports (node_id, id);
CREATE TABLE boots (
	id {{ID}},
	node_id TEXT NOT NULL REFERENCES nodes (id),
	at BIGINT NOT NULL,
	recipe TEXT NOT NULL,
	build TEXT NOT NULL,
	remote TEXT NOT NULL
);
CREATE INDEX boots_by_node ON boots (node_id, id);`,
	// 2: look nodes up by MAC, hostname or serial.
	`CREATE INDEX nodes_by_mac ON nodes (mac);
CREATE INDEX nodes_by_hostname ON nodes (hostname);
CREATE INDEX nodes_by_serial ON nodes (serial);`,
	// 3: bodies move to a table of their own, so listing reports never reads one; the
	// fleet page reads summary columns written at POST time (rows stored before this
	// migration are summarized by backfill when the store opens; summarized says which
	// are). size lets retention count bytes without reading bodies.
	`CREATE TABLE report_bodies (
	report_id BIGINT PRIMARY KEY REFERENCES reports (id) ON DELETE CASCADE,
	body {{BLOB}} NOT NULL
);
INSERT INTO report_bodies (report_id, body) SELECT id, body FROM reports;
ALTER TABLE reports DROP COLUMN body;
ALTER TABLE reports ADD COLUMN size BIGINT NOT NULL DEFAULT 0;
ALTER TABLE reports ADD COLUMN gpus BIGINT NOT NULL DEFAULT 0;
ALTER TABLE reports ADD COLUMN busbw_at_max DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE reports ADD COLUMN failing TEXT NOT NULL DEFAULT '[]';
ALTER TABLE reports ADD COLUMN summarized BIGINT NOT NULL DEFAULT 0;
UPDATE reports SET size = (SELECT length(b.body) FROM report_bodies b WHERE b.report_id = reports.id);`,
	// 4: the rollouts' builds, channels, verdicts, holds and events (rollout.go).
	rolloutMigration,
	// 5: attestation: nonces, the nodes' AKs, each report's attestation, refusals (attest.go).
	attestMigration,
	// 6: votes, predictions, spent-only nonces, AK enrollment and conflicts (trust.go).
	trustMigration,
	// 7: each node's latest burn-in progress (progress.go).
	progressMigration,
	// 8: an operator's request that a node's burn-in stop (progress.go).
	progressStopMigration,
}

// DB is the report database: SQLite or PostgreSQL, one schema and one set of
// migrations for both. It implements every store interface of fleetdb.
type DB struct {
	db  *sql.DB
	d   dialect
	wmu sync.Mutex // held around write transactions when d.serialize
	// reqs feeds the group committer (SQLite); nil: AddReport commits itself.
	reqs    chan *addReq
	stopped chan struct{}
	closeMu sync.RWMutex
	closed  bool
}

// Open opens the report store named by spec: a PostgreSQL DSN
// ("postgres://..." or "postgresql://...", or key=value with host=) or else the path of
// an SQLite database file, created if missing. Migrations run before it returns.
func Open(ctx context.Context, spec string) (*DB, error) {
	if strings.HasPrefix(spec, "postgres://") || strings.HasPrefix(spec, "postgresql://") || strings.Contains(spec, "host=") {
		return OpenPostgres(ctx, spec)
	}
	return OpenSQLite(ctx, spec)
}

// OpenSQLite opens (or creates) an SQLite database in WAL mode with full fsync, so a
// report acknowledged to a node survives a crash of the server or the machine. The
// file holds the token secret: it is created 0600 (SQLite gives its -wal and -shm
// files the same mode), and an existing one readable by others is narrowed to 0600.
func OpenSQLite(ctx context.Context, path string) (*DB, error) {
	if err := privateFile(path); err != nil {
		return nil, fmt.Errorf("report database %s: %w", path, err)
	}
	q := url.Values{}
	for _, p := range []string{"busy_timeout(10000)", "journal_mode(WAL)", "synchronous(FULL)", "foreign_keys(1)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("opening report database %s: %w", path, err)
	}
	s := &DB{db: db, d: sqliteDialect}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("report database %s: %w", path, err)
	}
	s.reqs, s.stopped = make(chan *addReq, 1024), make(chan struct{})
	go s.committer()
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		s.Close()
		return nil, fmt.Errorf("report database %s: journal mode %q, want wal (%v)", path, mode, err)
	}
	for _, side := range []string{path + "-wal", path + "-shm"} {
		if fi, err := os.Stat(side); err == nil && fi.Mode().Perm()&0o077 != 0 {
			os.Chmod(side, fi.Mode().Perm()&0o700)
		}
	}
	return s, nil
}

// privateFile creates path 0600 if it is missing, whatever the umask, and takes the
// group and other bits off an existing one.
func privateFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := f.Chmod(fi.Mode().Perm() & 0o700); err != nil {
			return fmt.Errorf("making it private (it holds the token secret): %w", err)
		}
	}
	return nil
}

// pgConns bounds each process's PostgreSQL connections: three replicas fit in the
// server's default max_connections of 100.
const pgConns = 24

// OpenPostgres connects to PostgreSQL with pgx and applies the migrations.
func OpenPostgres(ctx context.Context, dsn string) (*DB, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening PostgreSQL: %w", err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	// Bounded, and kept open: database/sql's default (no bound, 2 idle) makes a burst
	// fork a PostgreSQL backend per request, and replicas together could pass the
	// server's max_connections (100 by default). A request beyond the bound waits.
	db.SetMaxOpenConns(pgConns)
	db.SetMaxIdleConns(pgConns)
	s := &DB{db: db, d: postgresDialect}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("PostgreSQL: %w", err)
	}
	return s, nil
}

func (s *DB) Close() error {
	if s.reqs != nil {
		s.closeMu.Lock()
		if !s.closed {
			s.closed = true
			close(s.reqs)
			<-s.stopped
		}
		s.closeMu.Unlock()
	}
	return s.db.Close()
}

// migrate applies the migrations the database has not seen, each in a transaction.
func (s *DB) migrate(ctx context.Context) error {
	if err := s.migrateTo(ctx, migrations); err != nil {
		return err
	}
	return s.backfill(ctx)
}

// migrateTo applies list (migrations, or the first of them in the upgrade tests).
func (s *DB) migrateTo(ctx context.Context, migrations []string) error {
	// Under the migration lock too: two replicas starting on an empty PostgreSQL would
	// otherwise both create it, and one fails (CREATE ... IF NOT EXISTS is not atomic).
	err := s.write(ctx, func(tx *sql.Tx) error {
		if s.d.lockTx != "" {
			if _, err := tx.ExecContext(ctx, s.d.lockTx); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)`)
		return err
	})
	if err != nil {
		return fmt.Errorf("creating schema_migrations: %w", err)
	}
	for i, m := range migrations {
		version := i + 1
		err := s.write(ctx, func(tx *sql.Tx) error {
			if s.d.lockTx != "" {
				if _, err := tx.ExecContext(ctx, s.d.lockTx); err != nil {
					return err
				}
			}
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = $1`, version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			text := strings.NewReplacer("{{ID}}", s.d.id, "{{BLOB}}", s.d.blob).Replace(m)
			for _, stmt := range strings.Split(text, ";") {
				if strings.TrimSpace(stmt) == "" {
					continue
				}
				if _, err := tx.ExecContext(ctx, stmt); err != nil {
					return err
				}
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)`, version, time.Now().UnixMicro())
			return err
		})
		if err != nil {
			return fmt.Errorf("migration %d: %w", version, err)
		}
	}
	var newest int
	if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&newest); err != nil {
		return fmt.Errorf("reading schema version: %w", err)
	}
	if newest > len(migrations) {
		return fmt.Errorf("the database has schema version %d, this peerboot knows %d: use a newer peerboot", newest, len(migrations))
	}
	return nil
}

// backfill writes the summary columns of reports stored before migration 3, a batch
// at a time, decoding each body once.
func (s *DB) backfill(ctx context.Context) error {
	for {
		rows, err := s.db.QueryContext(ctx, `SELECT r.id, b.body FROM reports r JOIN report_bodies b ON b.report_id = r.id WHERE r.summarized = 0 ORDER BY r.id LIMIT 64`)
		if err != nil {
			return fmt.Errorf("summarizing old reports: %w", err)
		}
		var batch []fleetdb.StoredReport
		for rows.Next() {
			var r fleetdb.StoredReport
			if err := rows.Scan(&r.ID, &r.Body); err != nil {
				rows.Close()
				return fmt.Errorf("summarizing old reports: %w", err)
			}
			if rep, err := selftest.Decode(r.Body); err == nil {
				fleetdb.Summarize(&r, rep)
			}
			r.Size = int64(len(r.Body))
			r.Body = nil
			batch = append(batch, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("summarizing old reports: %w", err)
		}
		if len(batch) == 0 {
			return nil
		}
		err = s.write(ctx, func(tx *sql.Tx) error {
			for _, r := range batch {
				failing, _ := json.Marshal(r.Failing)
				if _, err := tx.ExecContext(ctx, `UPDATE reports SET size = $1, gpus = $2, busbw_at_max = $3, failing = $4, summarized = 1 WHERE id = $5`,
					r.Size, r.GPUs, r.BusBWAtMax, string(failing), r.ID); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("summarizing old reports: %w", err)
		}
	}
}

// write runs fn in a transaction, committed when fn returns nil.
func (s *DB) write(ctx context.Context, fn func(*sql.Tx) error) error {
	if s.d.serialize {
		s.wmu.Lock()
		defer s.wmu.Unlock()
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// addReq is one AddReport waiting for the committer.
type addReq struct {
	r    *fleetdb.StoredReport
	done chan error
}

// AddReport commits the report before it returns. On SQLite, reports that arrive
// together share one transaction (group commit): one fsync for a burst instead of one
// per report, each report still all-or-nothing behind its own savepoint.
func (s *DB) AddReport(ctx context.Context, r *fleetdb.StoredReport) (int64, error) {
	if r.ReceivedAt.IsZero() {
		r.ReceivedAt = time.Now()
	}
	req := &addReq{r: r, done: make(chan error, 1)}
	if s.reqs == nil {
		s.commitBatch(ctx, []*addReq{req})
	} else {
		s.closeMu.RLock()
		if s.closed {
			s.closeMu.RUnlock()
			return 0, errors.New("storing report: the store is closed")
		}
		s.reqs <- req
		s.closeMu.RUnlock()
	}
	err := <-req.done
	if errors.Is(err, fleetdb.ErrDuplicate) {
		return r.ID, fleetdb.ErrDuplicate
	}
	if err != nil {
		return 0, fmt.Errorf("storing report: %w", err)
	}
	return r.ID, nil
}

// committer commits whatever AddReport calls are queued, up to 256 at a time.
func (s *DB) committer() {
	defer close(s.stopped)
	for req := range s.reqs {
		batch := []*addReq{req}
	more:
		for len(batch) < 256 {
			select {
			case r, ok := <-s.reqs:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		s.commitBatch(context.Background(), batch)
	}
}

func (s *DB) commitBatch(ctx context.Context, batch []*addReq) {
	results := make([]error, len(batch))
	err := s.write(ctx, func(tx *sql.Tx) error {
		for i, req := range batch {
			if _, err := tx.ExecContext(ctx, "SAVEPOINT report"); err != nil {
				return err
			}
			err := insertReport(ctx, tx, req.r)
			if err != nil {
				if _, rerr := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT report"); rerr != nil {
					return rerr
				}
			}
			if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT report"); err != nil {
				return err
			}
			results[i] = err
		}
		return nil
	})
	for i, req := range batch {
		if err != nil && results[i] == nil {
			results[i] = err // the commit failed: nothing of the batch is stored
		}
		req.done <- results[i]
	}
}

func insertReport(ctx context.Context, tx *sql.Tx, r *fleetdb.StoredReport) error {
	at := r.ReceivedAt.UnixMicro()
	if _, err := tx.ExecContext(ctx, `INSERT INTO nodes (id, first_seen, last_seen) VALUES ($1, $2, $2)
ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen`, r.NodeID, at); err != nil {
		return err
	}
	failing, err := json.Marshal(r.Failing)
	if err != nil {
		return err
	}
	if r.Failing == nil {
		failing = []byte("[]")
	}
	err = tx.QueryRowContext(ctx, `INSERT INTO reports (node_id, received_at, recipe, build, verdict, sha256, remote, size, gpus, busbw_at_max, failing, summarized)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 1) ON CONFLICT (sha256) DO NOTHING RETURNING id`,
		r.NodeID, at, r.Recipe, r.Build, r.Verdict, r.SHA256, r.Remote, int64(len(r.Body)), r.GPUs, r.BusBWAtMax, string(failing)).Scan(&r.ID)
	if errors.Is(err, sql.ErrNoRows) {
		// The same node's report again: a retry whose answer was lost (or that went to
		// another replica). r.ID names the stored one; 0 for another node's (a replay).
		r.ID = 0
		if err := tx.QueryRowContext(ctx, `SELECT id FROM reports WHERE sha256 = $1 AND node_id = $2`, r.SHA256, r.NodeID).Scan(&r.ID); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		return fleetdb.ErrDuplicate
	}
	if err != nil {
		return err
	}
	r.Size = int64(len(r.Body))
	if _, err = tx.ExecContext(ctx, `INSERT INTO report_bodies (report_id, body) VALUES ($1, $2)`, r.ID, r.Body); err != nil {
		return err
	}
	return insertAttestation(ctx, tx, r)
}

// StoredReportID is the id of node's stored report with this sha256, 0 if none.
func (s *DB) StoredReportID(ctx context.Context, node, sum string) (int64, error) {
	var id int64
	err := s.db.QueryRowContext(ctx, `SELECT id FROM reports WHERE sha256 = $1 AND node_id = $2`, sum, node).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("looking up a report of %s: %w", node, err)
	}
	return id, nil
}

func (s *DB) RecordBoot(ctx context.Context, b fleetdb.Boot) error {
	if b.At.IsZero() {
		b.At = time.Now()
	}
	at := b.At.UnixMicro()
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO nodes (id, mac, hostname, serial, first_seen, last_seen, boots)
VALUES ($1, $2, $3, $4, $5, $5, 1)
ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen, boots = nodes.boots + 1,
	mac = CASE WHEN excluded.mac <> '' THEN excluded.mac ELSE nodes.mac END,
	hostname = CASE WHEN excluded.hostname <> '' THEN excluded.hostname ELSE nodes.hostname END,
	serial = CASE WHEN excluded.serial <> '' THEN excluded.serial ELSE nodes.serial END`,
			b.NodeID, b.MAC, b.Hostname, b.Serial, at); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO boots (node_id, at, recipe, build, remote) VALUES ($1, $2, $3, $4, $5)`,
			b.NodeID, at, b.Recipe, b.Build, b.Remote)
		return err
	})
	if err != nil {
		return fmt.Errorf("recording boot of %s: %w", b.NodeID, err)
	}
	return nil
}

// summaryColumns are a report's columns without its body.
const summaryColumns = `id, node_id, received_at, recipe, build, verdict, sha256, remote, size, gpus, busbw_at_max, failing`

const nodeColumns = `n.id, n.mac, n.hostname, n.serial, n.first_seen, n.last_seen, n.boots,
	(SELECT COUNT(*) FROM reports c WHERE c.node_id = n.id),
	r.id, r.received_at, r.recipe, r.build, r.verdict, r.sha256, r.remote, r.size, r.gpus, r.busbw_at_max, r.failing
FROM nodes n LEFT JOIN reports r ON r.id = (SELECT MAX(x.id) FROM reports x WHERE x.node_id = n.id)`

func scanNode(sc interface{ Scan(...any) error }) (*fleetdb.NodeSummary, error) {
	var (
		n                                            fleetdb.NodeSummary
		first, last                                  int64
		rid, rat, size, gpus                         sql.NullInt64
		busbw                                        sql.NullFloat64
		recipe, build, verdict, sum, remote, failing sql.NullString
	)
	if err := sc.Scan(&n.ID, &n.MAC, &n.Hostname, &n.Serial, &first, &last, &n.Boots, &n.Reports,
		&rid, &rat, &recipe, &build, &verdict, &sum, &remote, &size, &gpus, &busbw, &failing); err != nil {
		return nil, err
	}
	n.FirstSeen, n.LastSeen = time.UnixMicro(first).UTC(), time.UnixMicro(last).UTC()
	if rid.Valid {
		n.Latest = &fleetdb.StoredReport{ID: rid.Int64, NodeID: n.ID, ReceivedAt: time.UnixMicro(rat.Int64).UTC(), Recipe: recipe.String,
			Build: build.String, Verdict: verdict.String, SHA256: sum.String, Remote: remote.String,
			Size: size.Int64, GPUs: int(gpus.Int64), BusBWAtMax: busbw.Float64}
		if err := json.Unmarshal([]byte(failing.String), &n.Latest.Failing); err != nil {
			return nil, fmt.Errorf("report %d: summary: %w", rid.Int64, err)
		}
	}
	return &n, nil
}

func scanReport(sc interface{ Scan(...any) error }, body *[]byte) (*fleetdb.StoredReport, error) {
	var r fleetdb.StoredReport
	var at int64
	var failing string
	dst := []any{&r.ID, &r.NodeID, &at, &r.Recipe, &r.Build, &r.Verdict, &r.SHA256, &r.Remote, &r.Size, &r.GPUs, &r.BusBWAtMax, &failing}
	if body != nil {
		dst = append(dst, body)
	}
	if err := sc.Scan(dst...); err != nil {
		return nil, err
	}
	r.ReceivedAt = time.UnixMicro(at).UTC()
	if err := json.Unmarshal([]byte(failing), &r.Failing); err != nil {
		return nil, fmt.Errorf("report %d: summary: %w", r.ID, err)
	}
	return &r, nil
}

func (s *DB) Nodes(ctx context.Context) ([]fleetdb.NodeSummary, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+nodeColumns+` ORDER BY COALESCE(r.received_at, n.last_seen) DESC, n.id`)
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	defer rows.Close()
	out := []fleetdb.NodeSummary{}
	for rows.Next() {
		n, err := scanNode(rows)
		if err != nil {
			return nil, fmt.Errorf("listing nodes: %w", err)
		}
		out = append(out, *n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	return out, nil
}

func (s *DB) Node(ctx context.Context, key string) (*fleetdb.NodeSummary, error) {
	n, err := scanNode(s.db.QueryRowContext(ctx, `SELECT `+nodeColumns+`
WHERE n.id = $1 OR n.mac = $1 OR n.hostname = $1 OR n.serial = $1
ORDER BY CASE WHEN n.id = $1 THEN 0 ELSE 1 END, n.last_seen DESC LIMIT 1`, key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("node %q: %w", key, fleetdb.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading node %q: %w", key, err)
	}
	return n, nil
}

func (s *DB) Reports(ctx context.Context, nodeID string, limit int) ([]fleetdb.StoredReport, error) {
	q := `SELECT ` + summaryColumns + ` FROM reports WHERE node_id = $1 ORDER BY id DESC`
	args := []any{nodeID}
	if limit > 0 {
		q += ` LIMIT $2`
		args = append(args, limit)
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("listing reports of %s: %w", nodeID, err)
	}
	defer rows.Close()
	out := []fleetdb.StoredReport{}
	for rows.Next() {
		r, err := scanReport(rows, nil)
		if err != nil {
			return nil, fmt.Errorf("listing reports of %s: %w", nodeID, err)
		}
		out = append(out, *r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing reports of %s: %w", nodeID, err)
	}
	return out, nil
}

func (s *DB) Report(ctx context.Context, id int64) (*fleetdb.StoredReport, error) {
	var body []byte
	r, err := scanReport(s.db.QueryRowContext(ctx, `SELECT r.id, r.node_id, r.received_at, r.recipe, r.build, r.verdict, r.sha256, r.remote, r.size, r.gpus, r.busbw_at_max, r.failing, b.body
FROM reports r JOIN report_bodies b ON b.report_id = r.id WHERE r.id = $1`, id), &body)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("report %d: %w", id, fleetdb.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading report %d: %w", id, err)
	}
	r.Body = body
	return r, nil
}

// Prune applies the retention policy after a write: nodeID's reports beyond
// ReportsPerNode and boots beyond BootsPerNode, then the oldest reports while the
// bodies exceed ReportBytes (every node's latest report goes only after all older
// ones), then the least recently seen nodes without a report beyond UnreportedNodes.
// It reads before it writes, so a store within its bounds pays no write.
func (s *DB) Prune(ctx context.Context, nodeID string, ret fleetdb.Retention) (int64, error) {
	var deleted int64
	del := func(q string, args ...any) error {
		return s.write(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, q, args...)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err == nil && strings.Contains(q, "FROM reports") {
				deleted += n
			}
			return nil
		})
	}
	count := func(q string, args ...any) (int64, error) {
		var n int64
		err := s.db.QueryRowContext(ctx, q, args...).Scan(&n)
		return n, err
	}
	if nodeID != "" && ret.ReportsPerNode > 0 {
		n, err := count(`SELECT COUNT(*) FROM reports WHERE node_id = $1`, nodeID)
		if err != nil {
			return deleted, fmt.Errorf("retention: %w", err)
		}
		if n > int64(ret.ReportsPerNode) {
			if err := del(`DELETE FROM reports WHERE node_id = $1 AND id <= (SELECT id FROM reports WHERE node_id = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)`,
				nodeID, ret.ReportsPerNode); err != nil {
				return deleted, fmt.Errorf("retention: reports of %s: %w", nodeID, err)
			}
		}
	}
	if nodeID != "" && ret.BootsPerNode > 0 {
		n, err := count(`SELECT COUNT(*) FROM boots WHERE node_id = $1`, nodeID)
		if err != nil {
			return deleted, fmt.Errorf("retention: %w", err)
		}
		if n > int64(ret.BootsPerNode) {
			if err := del(`DELETE FROM boots WHERE node_id = $1 AND id <= (SELECT id FROM boots WHERE node_id = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)`,
				nodeID, ret.BootsPerNode); err != nil {
				return deleted, fmt.Errorf("retention: boots of %s: %w", nodeID, err)
			}
		}
	}
	if ret.ReportBytes > 0 {
		total, err := count(`SELECT CAST(COALESCE(SUM(size), 0) AS BIGINT) FROM reports`)
		if err != nil {
			return deleted, fmt.Errorf("retention: %w", err)
		}
		for _, latest := range []bool{false, true} {
			if total <= ret.ReportBytes {
				break
			}
			cond := `<>`
			if latest {
				cond = `=`
			}
			// The oldest first, until what they hold covers the excess.
			rows, err := s.db.QueryContext(ctx, `SELECT r.id, r.size FROM reports r WHERE r.id `+cond+` (SELECT MAX(x.id) FROM reports x WHERE x.node_id = r.node_id) ORDER BY r.id`)
			if err != nil {
				return deleted, fmt.Errorf("retention: %w", err)
			}
			var ids []int64
			for rows.Next() && total > ret.ReportBytes {
				var id, size int64
				if err := rows.Scan(&id, &size); err != nil {
					rows.Close()
					return deleted, fmt.Errorf("retention: %w", err)
				}
				ids = append(ids, id)
				total -= size
			}
			rows.Close()
			if err := inChunks(ids, func(in string, args []any) error {
				return del(`DELETE FROM reports WHERE id IN `+in, args...)
			}); err != nil {
				return deleted, fmt.Errorf("retention: over %d bytes: %w", ret.ReportBytes, err)
			}
		}
	}
	if ret.UnreportedNodes > 0 {
		const unreported = `FROM nodes n WHERE NOT EXISTS (SELECT 1 FROM reports r WHERE r.node_id = n.id)`
		n, err := count(`SELECT COUNT(*) ` + unreported)
		if err != nil {
			return deleted, fmt.Errorf("retention: %w", err)
		}
		if n > int64(ret.UnreportedNodes) {
			if err := s.write(ctx, func(tx *sql.Tx) error { return pruneUnreported(ctx, tx, s.d, unreported, ret.UnreportedNodes) }); err != nil {
				return deleted, fmt.Errorf("retention: nodes without reports: %w", err)
			}
		}
	}
	return deleted, nil
}

// pruneUnreported deletes the least recently seen nodes without a report beyond keep,
// with their boots. In PostgreSQL replicas prune one at a time (an advisory lock; each
// counts again under it, else both would delete the excess), and a node a boot or a
// report is writing right now is skipped (FOR UPDATE SKIP LOCKED): deleting it under
// that write would break the boots' or reports' foreign key.
func pruneUnreported(ctx context.Context, tx *sql.Tx, d dialect, unreported string, keep int) error {
	lock := ""
	if d.name == "postgres" {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(727267)`); err != nil {
			return err
		}
		lock = ` FOR UPDATE SKIP LOCKED`
	}
	var n int64
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) `+unreported).Scan(&n); err != nil {
		return err
	}
	if n <= int64(keep) {
		return nil
	}
	rows, err := tx.QueryContext(ctx, `SELECT n.id `+unreported+` ORDER BY n.last_seen, n.id LIMIT $1`+lock, n-int64(keep))
	if err != nil {
		return err
	}
	var ids []any
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	return inChunks(ids, func(in string, chunk []any) error {
		// Asked again, each statement seeing every commit so far: a report committed
		// after the SELECT's snapshot (the rows it locked came from it) keeps its node.
		if _, err := tx.ExecContext(ctx, `DELETE FROM boots WHERE node_id IN `+in+` AND NOT EXISTS (SELECT 1 FROM reports r WHERE r.node_id = boots.node_id)`, chunk...); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM nodes WHERE id IN `+in+` AND NOT EXISTS (SELECT 1 FROM reports r WHERE r.node_id = nodes.id)`, chunk...); err != nil {
			return err
		}
		// What attestation kept of a node goes with it (issue 28: orphans), but
		// its AK: recording one was an operator's decision (an enrollment window or
		// a pin), which retention does not undo.
		for _, table := range []string{"attest_nonces", "attest_refusals", "ak_conflicts", "soak_progress"} {
			if _, err := tx.ExecContext(ctx, `DELETE FROM `+table+` WHERE node_id IN `+in+` AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.id = `+table+`.node_id)`, chunk...); err != nil {
				return err
			}
		}
		return nil
	})
}

// inChunks calls f with vals 500 at a time, as an SQL IN list ("($1,$2,...)")
// and its arguments: a statement's parameters are bounded, a list of ids is not.
func inChunks[T any](vals []T, f func(in string, args []any) error) error {
	for len(vals) > 0 {
		chunk := vals[:min(len(vals), 500)]
		vals = vals[len(chunk):]
		args := make([]any, len(chunk))
		marks := make([]string, len(chunk))
		for i, v := range chunk {
			args[i], marks[i] = v, fmt.Sprintf("$%d", i+1)
		}
		if err := f("("+strings.Join(marks, ",")+")", args); err != nil {
			return err
		}
	}
	return nil
}

func (s *DB) Count(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM reports`).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting reports: %w", err)
	}
	return n, nil
}

func (s *DB) Secret(ctx context.Context, create func() ([]byte, error)) ([]byte, error) {
	read := func() ([]byte, error) {
		var v string
		err := s.db.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'token_secret'`).Scan(&v)
		if err != nil {
			return nil, err
		}
		return hex.DecodeString(v)
	}
	if b, err := read(); err == nil {
		return b, nil
	} else if !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("reading the token secret: %w", err)
	}
	fresh, err := create()
	if err != nil {
		return nil, fmt.Errorf("making a token secret: %w", err)
	}
	// Two servers starting at once: the first insert wins and both read it back.
	err = s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO meta (key, value) VALUES ('token_secret', $1) ON CONFLICT (key) DO NOTHING`, hex.EncodeToString(fresh))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("storing the token secret: %w", err)
	}
	b, err := read()
	if err != nil {
		return nil, fmt.Errorf("reading the token secret: %w", err)
	}
	return b, nil
}
