package netboot

import (
	"bufio"
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/testbin"
	"github.com/peerboot/peerboot/selftest"
)

// replica is one `peerboot serve` process of the load test.
type replica struct {
	cmd  *exec.Cmd
	base string // http://127.0.0.1:PORT
	log  *syncBuffer
}

// startReplica runs bin serve with args on a loopback port and waits for it to listen.
func startReplica(t *testing.T, bin string, args ...string) *replica {
	t.Helper()
	r := &replica{log: &syncBuffer{}}
	r.cmd = exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.cmd.Stderr = r.log
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.cmd.Process.Kill(); r.cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if m := regexp.MustCompile(`listening on (127\.0\.0\.1:\d+)`).FindStringSubmatch(sc.Text()); m != nil {
			r.base = "http://" + m[1]
			break
		}
	}
	if r.base == "" {
		r.cmd.Process.Kill()
		r.cmd.Wait()
		t.Fatalf("serve did not start:\n%s", r.log.String())
	}
	go io.Copy(io.Discard, stdout)
	return r
}

// TestLoadReplicas: two `peerboot serve` processes over one PostgreSQL, 200 simulated
// nodes. Each node fetches its boot script (its per-node token, signed with the secret
// the replicas share through the database) from one replica and POSTs its reports
// alternately to both; a third of the way through the burst one replica is SIGKILLed,
// and a node whose request got no answer sends it again, to the survivor. Every report
// ends acknowledged, each stored exactly once under the id it was acknowledged with
// (a retry of a report the killed replica had committed is answered as a duplicate).
// The inventory rolls the recipe out: build A on every channel, build B new on the
// canary channel that the first 20 nodes follow, promote_after = 5. Their PASSes for
// B arrive at both replicas, and B is promoted to stable exactly once.
// In the same run, for the figures: the same burst at one replica (the reference) and
// at two left alone. Figures (reports/s, POST latency) are logged:
//
//	go test -run TestLoadReplicas -v ./netboot/
//
// PEERBOOT_LOAD_NODES and PEERBOOT_LOAD_REPORTS change the shape.
func TestLoadReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("builds peerboot and runs two servers over PostgreSQL")
	}
	nodes, perNode := envInt("PEERBOOT_LOAD_NODES", 200), envInt("PEERBOOT_LOAD_REPORTS", 5)
	const canaries, promoteAfter = 20, 5
	dir, err := testbin.Build(t.TempDir(), map[string]string{"peerboot": "../cmd/peerboot"})
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "peerboot")
	root := t.TempDir()
	outA, outB := filepath.Join(root, "a", "default"), filepath.Join(root, "b", "default")
	fakeBuild(t, outA, "default", 4096)
	fakeBuild(t, outB, "default", 8192) // another initrd: another build id
	// Builds loaded together enter the catalogue oldest manifest.json first: A, then B.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(outA, "manifest.json"), old, old); err != nil {
		t.Fatal(err)
	}
	buildA, errA := LoadBuild(outA)
	buildB, errB := LoadBuild(outB)
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	inv := filepath.Join(root, "rack.toml")
	// The canaries are listed by MAC: only such nodes vote (issue 28).
	rack := fmt.Sprintf(`default = "default"
[[rollout]]
recipe = "default"
channels = ["canary", "stable"]
promote_after = %d
`, promoteAfter)
	for n := range canaries {
		rack += fmt.Sprintf("[[node]]\nmac = %q\nrecipe = \"default\"\nchannel = \"canary\"\n", loadMAC(n))
	}
	if err := os.WriteFile(inv, []byte(rack), 0o644); err != nil {
		t.Fatal(err)
	}
	host := func(n int) string {
		if n < canaries {
			return fmt.Sprintf("canary-%d", n)
		}
		return fmt.Sprintf("stable-%d", n)
	}
	// The nodes share 127.0.0.1 and post faster than a rack would: the per-process rate
	// limits are lifted.
	serve := func(dsn string) []string {
		return []string{"--db", dsn, "--inventory", inv, "--burst", "100000", "--source-burst", "1000000",
			"--operator-token", filepath.Join(root, "operator.token"), outA, outB}
	}
	check := func(dsn string, res loadResult) {
		t.Helper()
		checkStored(t, dsn, res, nodes, perNode)
		for n := 0; n < canaries; n++ {
			if res.scriptBuild[n] != buildB.ID {
				t.Errorf("canary node %d was served build %s, want B %s", n, res.scriptBuild[n], buildB.ID)
			}
		}
		// The rest follow stable: A, or B once promoted (a script fetched late).
		onA := 0
		for n := canaries; n < nodes; n++ {
			switch res.scriptBuild[n] {
			case buildA.ID:
				onA++
			case buildB.ID:
			default:
				t.Errorf("stable node %d was served build %q, want A %s or B %s", n, res.scriptBuild[n], buildA.ID, buildB.ID)
			}
		}
		if onA == 0 {
			t.Errorf("no stable node was served A: B was on stable before any verdict")
		}
		checkPromotedOnce(t, dsn, buildB.ID)
	}

	// Each phase's servers stop before the next starts: each keeps up to 24 PostgreSQL
	// connections open, and the test server allows 100.
	stop := func(reps []*replica) {
		for _, r := range reps {
			r.cmd.Process.Kill()
			r.cmd.Wait()
		}
	}
	refDSN := postgresDSN(t)
	refReps := []*replica{startReplica(t, bin, serve(refDSN)...)}
	ref := loadBurst(t, refReps, nodes, perNode, host, false)
	check(refDSN, ref)
	stop(refReps)

	// Two replicas, both started at once on an empty database (migrations and the
	// secret must not race): once left alone, once with replica 0 killed mid-burst.
	two := func() (string, []*replica) {
		dsn := postgresDSN(t)
		reps := make([]*replica, 2)
		var wg sync.WaitGroup
		for i := range reps {
			wg.Add(1)
			go func() { defer wg.Done(); reps[i] = startReplica(t, bin, serve(dsn)...) }()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		return dsn, reps
	}
	dsn, reps := two()
	calm := loadBurst(t, reps, nodes, perNode, host, false)
	check(dsn, calm)
	stop(reps)
	dsn, reps = two()
	res := loadBurst(t, reps, nodes, perNode, host, true)
	check(dsn, res)
	if res.retries == 0 {
		t.Errorf("no request was retried: the kill came after the burst")
	}
	// The survivor's API shows every node, whichever replica it reported to, each
	// with all its reports.
	resp, err := http.Get(reps[1].base + "/api/nodes")
	if err != nil {
		t.Fatal(err)
	}
	var listed []struct {
		ID      string `json:"id"`
		Reports int64  `json:"reports"`
	}
	err = json.NewDecoder(resp.Body).Decode(&listed)
	resp.Body.Close()
	short := 0
	for _, n := range listed {
		if n.Reports != int64(perNode) {
			short++
		}
	}
	if err != nil || len(listed) != nodes || short > 0 {
		t.Errorf("the survivor's /api/nodes: %d nodes, %d without their %d reports (%v); want %d", len(listed), short, perNode, err, nodes)
	}
	t.Logf("reference, 1 replica over PostgreSQL: %s", ref)
	t.Logf("2 replicas over PostgreSQL: %s; %.2fx the reference's reports/s", calm, calm.rate()/ref.rate())
	t.Logf("2 replicas over PostgreSQL, replica 0 SIGKILLed after %d acks: %s; %d requests retried on the survivor, "+
		"%d answered as duplicates (committed by the killed replica, its answer lost); 0 lost; %.2fx the reference's reports/s",
		res.killedAt, res, res.retries, res.duplicates(), res.rate()/ref.rate())
	t.Logf("why requests were retried: %v", res.causes)
}

// loadResult is what one burst acknowledged and how fast.
type loadResult struct {
	acked       map[string]loadAck // sha256 -> the answer that acknowledged it
	latencies   []time.Duration    // of each acknowledging POST, sorted
	elapsed     time.Duration
	retries     int64
	causes      map[string]int // why requests were retried: the error's last part, counted
	scriptBuild []string       // the build each node's script named
	killedAt    int64
	nodes, per  int
}

type loadAck struct {
	id        int64
	duplicate bool
}

// loadMAC is node n's MAC.
func loadMAC(n int) string { return fmt.Sprintf("52:54:00:20:%02x:%02x", n>>8, n&0xff) }

func (r loadResult) rate() float64 { return float64(len(r.acked)) / r.elapsed.Seconds() }

func (r loadResult) duplicates() (n int) {
	for _, a := range r.acked {
		if a.duplicate {
			n++
		}
	}
	return n
}

func (r loadResult) String() string {
	pct := func(p float64) time.Duration {
		return r.latencies[int(p*float64(len(r.latencies)-1))].Round(100 * time.Microsecond)
	}
	return fmt.Sprintf("%d nodes x %d reports, %d acknowledged in %.2fs = %.0f reports/s, POST latency p50 %v, p99 %v, max %v",
		r.nodes, r.per, len(r.acked), r.elapsed.Seconds(), r.rate(), pct(0.5), pct(0.99), pct(1))
}

// loadBurst runs the nodes against reps: node n fetches its script from replica n%len
// and sends report i first to replica (n+i)%len, on no answer (or a 5xx) to the next,
// the same bytes: a node's retry. With kill, reps[0] is SIGKILLed once a third of
// the reports are acknowledged.
func loadBurst(t *testing.T, reps []*replica, nodes, perNode int, host func(int) string, kill bool) loadResult {
	t.Helper()
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: nodes}}
	res := loadResult{acked: map[string]loadAck{}, causes: map[string]int{}, scriptBuild: make([]string, nodes), nodes: nodes, per: perNode}
	var (
		mu      sync.Mutex
		errs    []string
		ackN    atomic.Int64
		retries atomic.Int64
	)
	fail := func(format string, a ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	do := func(first int, mk func(base string) *http.Request) (*http.Response, []byte, time.Duration, error) {
		var last error
		for try := 0; try < 6; try++ {
			rep := reps[(first+try)%len(reps)]
			t0 := time.Now()
			resp, err := client.Do(mk(rep.base))
			if err == nil {
				body, rerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				if rerr == nil && resp.StatusCode < 500 {
					return resp, body, time.Since(t0), nil
				}
				err = fmt.Errorf("%s %s %v", resp.Status, body, rerr)
			}
			last = err
			retries.Add(1)
			mu.Lock()
			cause := err.Error()
			if i := strings.LastIndex(cause, ": "); i >= 0 {
				cause = cause[i+2:]
			}
			res.causes[fmt.Sprintf("replica %d: %s", (first+try)%len(reps), cause)]++
			mu.Unlock()
		}
		return nil, nil, 0, last
	}

	start := time.Now()
	var wg sync.WaitGroup
	for n := 0; n < nodes; n++ {
		wg.Add(1)
		go func(n int) {
			defer wg.Done()
			mac := loadMAC(n)
			resp, script, _, err := do(n, func(base string) *http.Request {
				req, _ := http.NewRequest("GET", base+"/boot.ipxe?mac="+mac+"&host="+host(n), nil)
				return req
			})
			if err != nil || resp.StatusCode != 200 {
				fail("node %d script: %v %s", n, err, script)
				return
			}
			_, _, token := parseScript(string(script))
			m := regexp.MustCompile(`peerboot\.report_url=http://[^/ ]+(/reports\?node=\S+)`).FindSubmatch(script)
			if token == "" || m == nil {
				fail("node %d: script without token or report URL:\n%s", n, script)
				return
			}
			path := string(m[1])
			if b := regexp.MustCompile(`-> recipe \S+, build ([0-9a-f]{16})`).FindSubmatch(script); b != nil {
				res.scriptBuild[n] = string(b[1]) // each goroutine its own index
			}
			for i := 0; i < perNode; i++ {
				r := DemoReport(Epyc4GPU, n*perNode+i, false)
				r.Recipe.Name = "default"
				r.StartedAt = fmt.Sprintf("2026-12-01T17:%02d:%02dZ-%d", i, n%60, n)
				body, err := selftest.Encode(r)
				if err != nil {
					fail("node %d: %v", n, err)
					return
				}
				resp, answer, lat, err := do(n+i, func(base string) *http.Request {
					req, _ := http.NewRequest("POST", base+path, bytes.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+token)
					return req
				})
				if err != nil {
					fail("node %d report %d: %v", n, i, err)
					return
				}
				var a struct {
					ID        int64  `json:"id"`
					SHA256    string `json:"sha256"`
					Duplicate bool   `json:"duplicate"`
				}
				json.Unmarshal(answer, &a)
				if resp.StatusCode != http.StatusCreated && !(resp.StatusCode == http.StatusOK && a.Duplicate) || a.ID == 0 {
					fail("node %d report %d: %s %s", n, i, resp.Status, answer)
					return
				}
				mu.Lock()
				if prev, ok := res.acked[a.SHA256]; ok {
					errs = append(errs, fmt.Sprintf("node %d report %d acknowledged twice: ids %d and %d", n, i, prev.id, a.ID))
				}
				res.acked[a.SHA256] = loadAck{a.ID, a.Duplicate}
				res.latencies = append(res.latencies, lat)
				mu.Unlock()
				ackN.Add(1)
			}
		}(n)
	}
	if kill {
		// SIGKILL: no shutdown, the POSTs in flight are cut.
		for ackN.Load() < int64(nodes*perNode/3) && time.Since(start) < time.Minute {
			time.Sleep(time.Millisecond)
		}
		res.killedAt = ackN.Load()
		if err := reps[0].cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.retries = retries.Load()
	for i, e := range errs {
		if i < 10 {
			t.Error(e)
		}
	}
	if len(errs) > 0 {
		logs := ""
		for _, r := range reps {
			logs += "\n" + tail(r.log.String())
		}
		t.Fatalf("%d failures; replica logs:%s", len(errs), logs)
	}
	slices.Sort(res.latencies)
	return res
}

// checkStored: the database holds each acknowledged report once, under the id it was
// acknowledged with, nothing else, and every node's boot.
func checkStored(t *testing.T, dsn string, res loadResult, nodes, perNode int) {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT sha256, id FROM reports`)
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]int64{}
	rowsN := 0
	for rows.Next() {
		var sum string
		var id int64
		if err := rows.Scan(&sum, &id); err != nil {
			t.Fatal(err)
		}
		stored[sum] = id
		rowsN++
	}
	rows.Close()
	lost, wrongID := 0, 0
	for sum, a := range res.acked {
		id, ok := stored[sum]
		switch {
		case !ok:
			lost++
		case id != a.id:
			wrongID++
		}
	}
	total := nodes * perNode
	if len(res.acked) != total || lost > 0 || wrongID > 0 || rowsN != total || len(stored) != rowsN {
		t.Fatalf("%d reports acknowledged of %d sent; %d rows, %d distinct; %d acknowledged but lost, %d stored under another id",
			len(res.acked), total, rowsN, len(stored), lost, wrongID)
	}
	var nodeRows, boots int
	// A script fetch the killed replica recorded but never answered is fetched (and
	// recorded) again at the survivor: a boot for each node, and at most one more for
	// each retried request.
	if err := db.QueryRow(`SELECT COUNT(*), COALESCE(SUM(boots), 0) FROM nodes`).Scan(&nodeRows, &boots); err != nil ||
		nodeRows != nodes || boots < nodes || boots > nodes+int(res.retries) {
		t.Errorf("%d nodes with %d boots recorded, want %d and %d (+ at most %d retried) (%v)", nodeRows, boots, nodes, nodes, res.retries, err)
	}
}

// checkPromotedOnce: the rollout recorded exactly one promotion, of build, to stable,
// and stable serves it.
func checkPromotedOnce(t *testing.T, dsn, build string) {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var promotions, ofBuild int
	var stable string
	err = db.QueryRow(`SELECT COUNT(*), COUNT(*) FILTER (WHERE build = $1 AND to_channel = 'stable') FROM rollout_events WHERE kind = 'promote'`, build).Scan(&promotions, &ofBuild)
	if err == nil {
		err = db.QueryRow(`SELECT build FROM rollout_channels WHERE recipe = 'default' AND channel = 'stable'`).Scan(&stable)
	}
	if err != nil || promotions != 1 || ofBuild != 1 || stable != build {
		t.Errorf("%d promotions recorded, %d of build %s to stable; stable serves %q (%v): want exactly one, and stable serving it",
			promotions, ofBuild, build, stable, err)
	}
}

// tail is the end of a log, for a failure message.
func tail(s string) string {
	if len(s) > 3000 {
		s = "..." + s[len(s)-3000:]
	}
	return strings.TrimSpace(s)
}
