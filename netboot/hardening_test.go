package netboot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/netboot/fleetdb/sqldb"
	"github.com/peerboot/peerboot/selftest"
)

// TestBootScriptRowsBounded (issue 15 item 4): boot scripts are public, so made-up
// MACs fetching them were each a node row for ever (200 fetches, 200 rows). Nodes
// that never reported are kept up to a bound, the least recently seen dropped.
func TestBootScriptRowsBounded(t *testing.T) {
	e := newEnv(t, Options{Retention: fleetdb.Retention{UnreportedNodes: 50, BootsPerNode: 3}})
	for i := 0; i < 200; i++ {
		if resp, body := e.get(t, fmt.Sprintf("/boot.ipxe?mac=02:00:00:00:%02x:%02x", i>>8, i&0xff)); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	for i := 0; i < 10; i++ {
		e.get(t, "/boot.ipxe?mac=02:00:00:00:00:c7")
	}
	nodes, err := e.store.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) > 50 {
		t.Fatalf("%d node rows from 200 unauthenticated script fetches, want at most 50", len(nodes))
	}
	if _, err := e.store.Node(context.Background(), "02:00:00:00:00:00"); err == nil {
		t.Error("the least recently seen made-up node was kept")
	}
	// A node that then reports with its token is kept whatever else fetches scripts.
	b := e.build(t, "default")
	real := "02:00:00:00:00:c7"
	if resp, body := e.post(t, "/reports?node="+real, e.srv.Token(b.ID, real), reportBody(t, Epyc4GPU, 0, false)); resp.StatusCode != 201 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	for i := 0; i < 100; i++ {
		e.get(t, fmt.Sprintf("/boot.ipxe?mac=02:00:00:01:%02x:%02x", i>>8, i&0xff))
	}
	n, err := e.store.Node(context.Background(), real)
	if err != nil || n.Reports != 1 {
		t.Errorf("the reporting node: %+v %v", n, err)
	}
}

// TestResponseHeaders (issue 15 item 8): every API answer, and every other, carries
// nosniff and a CSP; /api/reports/ID served stored bytes as JSON without them.
func TestResponseHeaders(t *testing.T) {
	e := seededEnv(t, Options{})
	nodes, _ := e.store.Nodes(context.Background())
	// A node with a report (the demo's burn-in has none yet).
	nodes = slices.DeleteFunc(nodes, func(n fleetdb.NodeSummary) bool { return n.Latest == nil })
	id := nodes[0].Latest.ID
	b := e.build(t, "default")
	paths := []string{"/api/nodes", "/api/nodes/" + nodes[0].ID, fmt.Sprintf("/api/reports/%d", id), "/api/reports/999999", "/api/reports/x",
		"/api/builds", "/", "/nodes/" + nodes[0].ID, "/boot.ipxe?mac=52:54:00:00:00:01", "/boot.ipxe", "/healthz",
		"/builds/default/" + b.ID + "/manifest.json", "/nope"}
	check := func(what string, resp *http.Response) {
		t.Helper()
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s (%d): no X-Content-Type-Options: nosniff", what, resp.StatusCode)
		}
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("%s (%d): Content-Security-Policy %q", what, resp.StatusCode, csp)
		}
	}
	for _, p := range paths {
		resp, _ := e.get(t, p)
		check(p, resp)
	}
	resp, _ := e.post(t, "/reports?node=52:54:00:00:00:01", e.srv.Token(b.ID, "52:54:00:00:00:01"), reportBody(t, Epyc4GPU, 5, false))
	if resp.StatusCode != 201 {
		t.Fatalf("POST: %d", resp.StatusCode)
	}
	check("POST /reports", resp)
	resp, _ = e.post(t, "/reports?node=52:54:00:00:00:01", "", nil)
	check("POST /reports refused", resp)
}

// TestSlowClients (issue 15 item 5): 500 clients that stall (headers never finished,
// a report body never sent, a download never read) are cut off by the deadlines, and
// meanwhile GET /boot.ipxe keeps answering within 100 ms at the 99th percentile.
// Before, the body and the download had no deadline: 150 of each held 464
// descriptors after 30 s.
//
//	go test -run TestSlowClients -v ./netboot/
func TestSlowClients(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 500 connections")
	}
	const slow = 500
	root := t.TempDir()
	dir := filepath.Join(root, "default")
	fakeBuild(t, dir, "default", 64<<20) // more than loopback's socket buffers hold
	bs, err := LoadBuilds([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqldb.OpenSQLite(context.Background(), filepath.Join(root, "reports.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lim := Limits{HeaderTimeout: time.Second, BodyTimeout: time.Second, WriteIdle: time.Second, IdleTimeout: 2 * time.Second}
	srv, err := New(context.Background(), Options{Builds: bs, Store: st, Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.HTTPServer()
	go srv.Serve(hs, ln)
	defer hs.Close()
	addr := ln.Addr().String()
	b, _ := bs.Get("default")
	fdsBefore := openFDs(t)

	// The stalled clients: each says what it got when the server let it go.
	type result struct {
		kind string
		cut  bool // the server closed the connection
		got  int64
		err  error
	}
	results := make(chan result, slow)
	var opened sync.WaitGroup
	for i := 0; i < slow; i++ {
		opened.Add(1)
		go func(i int) {
			c, err := net.Dial("tcp", addr)
			opened.Done()
			if err != nil {
				results <- result{err: err}
				return
			}
			defer c.Close()
			var kind string
			switch i % 3 {
			case 0:
				kind = "headers"
				fmt.Fprintf(c, "GET /boot.ipxe?mac=52:54:00:00:00:01 HTTP/1.1\r\nHost: x\r\n")
			case 1:
				kind = "body"
				node := fmt.Sprintf("52:54:00:01:%02x:%02x", i>>8, i&0xff)
				fmt.Fprintf(c, "POST /reports?node=%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 4000\r\n\r\n{", node, srv.Token(b.ID, node))
			case 2:
				kind = "download"
				fmt.Fprintf(c, "GET /builds/default/%s/pxe/initrd.img HTTP/1.1\r\nHost: x\r\n\r\n", b.ID)
			}
			// Stall well past the deadlines, then see whether the server is still there:
			// a connection it closed reads to its end (EOF or reset) with less than the
			// whole file; one it kept would go on (the client gives up at 20 s).
			time.Sleep(4 * time.Second)
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			n, err := io.Copy(io.Discard, c)
			var ne net.Error
			timedOut := err != nil && errorsAs(err, &ne) && ne.Timeout()
			results <- result{kind: kind, cut: !timedOut && n < 64<<20, got: n, err: err}
		}(i)
	}
	opened.Wait()
	time.Sleep(200 * time.Millisecond) // the requests are in
	peak := openFDs(t)

	// Meanwhile, a node boots.
	client := &http.Client{Timeout: 5 * time.Second}
	var lat []time.Duration
	for i := 0; i < 200; i++ {
		t0 := time.Now()
		resp, err := client.Get(fmt.Sprintf("http://%s/boot.ipxe?mac=52:54:00:02:00:%02x", addr, i&0xff))
		if err != nil {
			t.Fatalf("boot script %d during the stall: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("boot script %d: %s", i, resp.Status)
		}
		lat = append(lat, time.Since(t0))
		time.Sleep(5 * time.Millisecond)
	}
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]

	kept := map[string]int{}
	for i := 0; i < slow; i++ {
		r := <-results
		if r.err != nil && r.kind == "" {
			t.Fatalf("dial: %v", r.err)
		}
		if !r.cut {
			kept[r.kind]++
		}
	}
	client.CloseIdleConnections()
	time.Sleep(300 * time.Millisecond)
	fdsAfter := openFDs(t)
	t.Logf("%d stalled clients: %d descriptors open at the peak, %d before, %d after; GET /boot.ipxe meanwhile p50 %v, p99 %v, max %v",
		slow, peak, fdsBefore, fdsAfter, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), lat[len(lat)-1].Round(10*time.Microsecond))
	if len(kept) > 0 {
		t.Errorf("stalled clients the server kept: %v", kept)
	}
	// The figure (goal: p99 under 100 ms) is logged above and reported with the
	// load it was measured under; the assertion is liveness with a margin that a
	// loaded 2-core CI box running other packages' tests still meets, since a
	// timed assertion at the goal would fail on load, not on a bug.
	if p99 > 2*time.Second {
		t.Errorf("GET /boot.ipxe p99 %v during the stall: the stalled clients starve the server", p99)
	}
	if fdsAfter > fdsBefore+20 {
		t.Errorf("%d descriptors open after the clients were cut off, %d before", fdsAfter, fdsBefore)
	}
}

func errorsAs(err error, target *net.Error) bool {
	for err != nil {
		if ne, ok := err.(net.Error); ok {
			*target = ne
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestHeaderLimit (issue 15 item 5): headers past MaxHeaderBytes are refused with
// 431 instead of net/http's default of 1 MB per request.
func TestHeaderLimit(t *testing.T) {
	e := newEnv(t, Options{Limits: Limits{MaxHeaderBytes: 8 << 10}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := e.srv.HTTPServer()
	go e.srv.Serve(hs, ln)
	defer hs.Close()
	req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/healthz", nil)
	req.Header.Set("X-Padding", strings.Repeat("a", 64<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("64 KiB of headers: %s, want 431", resp.Status)
	}
}

// TestConnectionCap: past MaxConns a connection waits in the backlog until one closes.
func TestConnectionCap(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ll := LimitListener(ln, 2)
	defer ll.Close()
	var accepted atomic.Int32
	conns := make(chan net.Conn, 3)
	go func() {
		for {
			c, err := ll.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			conns <- c
		}
	}()
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	time.Sleep(200 * time.Millisecond)
	if n := accepted.Load(); n != 2 {
		t.Fatalf("%d accepted with a cap of 2", n)
	}
	(<-conns).Close()
	deadline := time.Now().Add(5 * time.Second)
	for accepted.Load() != 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := accepted.Load(); n != 3 {
		t.Errorf("%d accepted after one closed, want 3", n)
	}
}

// bigReport is a report of real structure of about size bytes: the 8-GPU fixture with
// a kernel log and findings with evidence, as a node with a noisy driver sends.
func bigReport(t testing.TB, size int) *selftest.Report {
	r := DemoReport(Xeon8GPU, 0, true)
	r.Recipe.Name = "default"
	base, _ := selftest.Encode(r)
	line := "[   12.345678] NVRM: GPU at PCI:0000:81:00: GPU-5f2c9a: Xid (PCI:0000:81:00): 79, pid=1234, name=p2pcheck, GPU has fallen off the bus."
	for i := 0; len(base)+i*(len(line)+12) < size*3/4; i++ {
		r.Modules[0].KernelLog = append(r.Modules[0].KernelLog, fmt.Sprintf("%s #%06d", line, i))
	}
	for i := 0; i < 1000; i++ {
		r.KernelEvents = append(r.KernelEvents, selftest.KEvent{Kind: "xid", BDF: "0000:81:00.0", Code: 79, Line: line})
	}
	body, _ := selftest.Encode(r)
	for i := 0; len(body) < size; i++ {
		r.Add(selftest.SevWarn, fmt.Sprintf("kernel.noise.%d", i), strings.Repeat("a noisy kernel line ", 20), "")
		if i%200 == 199 {
			body, _ = selftest.Encode(r)
		}
	}
	r.Settle()
	return r
}

// fillFleet stores one report of body's structure per node, as POST would (the
// summary from the decoded report), each made unique in started_at.
func fillFleet(t testing.TB, st fleetdb.Store, nodes int, rep *selftest.Report) int64 {
	rep.StartedAt = "2026-11-20T08:00:00Z-000000"
	body, err := selftest.Encode(rep)
	if err != nil {
		t.Fatal(err)
	}
	if _, status, err := decodeReport(body); err != nil {
		t.Fatalf("the fixture is refused (%d): %v", status, err)
	}
	at := bytes.Index(body, []byte("-000000"))
	var wg sync.WaitGroup
	var firstErr atomic.Value
	work := make(chan int)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				b := slices.Clone(body)
				copy(b[at:], fmt.Sprintf("-%06d", n))
				sum := sha256.Sum256(b)
				node := fmt.Sprintf("52:54:00:%02x:%02x:%02x", n>>16, (n>>8)&0xff, n&0xff)
				st.RecordBoot(context.Background(), fleetdb.Boot{NodeID: node, MAC: node, Recipe: "default", Build: "b"})
				sr := &fleetdb.StoredReport{NodeID: node, Recipe: "default", Build: "b", Verdict: rep.Verdict, SHA256: hex.EncodeToString(sum[:]), Remote: "127.0.0.1", Body: b}
				fleetdb.Summarize(sr, rep)
				if _, err := st.AddReport(context.Background(), sr); err != nil {
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	for n := 0; n < nodes; n++ {
		work <- n
	}
	close(work)
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		t.Fatal(err)
	}
	return int64(len(body))
}

// fleetCost is what one GET / costs: bytes allocated (the whole process: the handler,
// the HTTP client and the transport) and the time to the last byte.
func fleetCost(t testing.TB, url string) (allocated uint64, took time.Duration, page string) {
	// The page is read into a buffer grown beforehand: what is counted is the server's.
	var buf bytes.Buffer
	buf.Grow(32 << 20)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	t0 := time.Now()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	buf.ReadFrom(resp.Body)
	resp.Body.Close()
	took = time.Since(t0)
	runtime.ReadMemStats(&after)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /: %s", resp.Status)
	}
	return after.TotalAlloc - before.TotalAlloc, took, buf.String()
}

// TestFleetPageReadsNoBodies (issue 15 item 7, in -short too): the fleet page's cost
// does not grow with the reports' size; before, it decoded every node's latest body
// (100 nodes x 4 MiB: 12.7 s and 1.3 GB).
func TestFleetPageReadsNoBodies(t *testing.T) {
	e := newEnv(t, Options{})
	size := fillFleet(t, e.store, 20, bigReport(t, 4<<20))
	alloc, took, page := fleetCost(t, e.http.URL+"/")
	t.Logf("GET / over 20 nodes with %.1f MiB reports: %.2f MiB allocated, %v", float64(size)/(1<<20), float64(alloc)/(1<<20), took)
	if strings.Count(page, `<tr class="node"`) != 20 || !strings.Contains(page, "copy.corrupt") {
		t.Errorf("the page lacks the nodes or their findings")
	}
	if alloc > 4<<20 {
		t.Errorf("GET / allocated %.1f MiB for 20 nodes: it reads the report bodies", float64(alloc)/(1<<20))
	}
}

// TestFleetPage1000Nodes (issue 15 figure): GET / over 1,000 nodes with 4 MiB reports
// allocates under 50 MiB and answers in under 500 ms. It stores 4 GiB, so it runs in
// `make test` but not under -short (where TestFleetPageReadsNoBodies stands in).
//
//	go test -run TestFleetPage1000Nodes -v ./netboot/
func TestFleetPage1000Nodes(t *testing.T) {
	if testing.Short() {
		t.Skip("stores 4 GiB of reports")
	}
	nodes := envInt("PEERBOOT_FLEET_NODES", 1000)
	e := newEnv(t, Options{})
	t0 := time.Now()
	size := fillFleet(t, e.store, nodes, bigReport(t, 4<<20))
	fill := time.Since(t0)
	var allocs []uint64
	var tooks []time.Duration
	for i := 0; i < 3; i++ {
		alloc, took, page := fleetCost(t, e.http.URL+"/")
		if n := strings.Count(page, `<tr class="node"`); n != nodes {
			t.Fatalf("%d nodes on the page, want %d", n, nodes)
		}
		allocs, tooks = append(allocs, alloc), append(tooks, took)
	}
	t.Logf("%d nodes with %.2f MiB reports (%.1f GiB stored in %v): GET / allocated %.1f, %.1f, %.1f MiB; answered in %v, %v, %v",
		nodes, float64(size)/(1<<20), float64(size)*float64(nodes)/(1<<30), fill.Round(time.Second),
		float64(allocs[0])/(1<<20), float64(allocs[1])/(1<<20), float64(allocs[2])/(1<<20), tooks[0].Round(time.Millisecond), tooks[1].Round(time.Millisecond), tooks[2].Round(time.Millisecond))
	slices.Sort(allocs)
	slices.Sort(tooks)
	if allocs[1] > 50<<20 {
		t.Errorf("GET / allocated %.1f MiB (median of 3), want under 50", float64(allocs[1])/(1<<20))
	}
	// Goal 500 ms, logged above; asserted with a margin for a loaded CI box (a
	// page that decoded the bodies takes tens of seconds here).
	if tooks[1] > 5*time.Second {
		t.Errorf("GET / took %v (median of 3): it must not scale with the report bodies", tooks[1])
	}
}
