package netboot

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peerboot/peerboot/netboot/fleetdb/sqldb"
	"github.com/peerboot/peerboot/selftest"
)

// TestLoad200Nodes: 200 simulated nodes on loopback, all at once, each fetch its boot
// script, fetch a 100 MiB initrd in 8 MiB range requests, and POST a report. No
// report is lost or stored twice; every node gets exactly its initrd's bytes (the first
// ten check the sha256 the script names). Throughput and POST latency are logged:
//
//	go test -run TestLoad200Nodes -v ./netboot/
//
// PEERBOOT_LOAD_NODES and PEERBOOT_LOAD_MIB change the shape.
func TestLoad200Nodes(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 20 GiB over loopback")
	}
	nodes, mib := envInt("PEERBOOT_LOAD_NODES", 200), envInt("PEERBOOT_LOAD_MIB", 100)
	const chunk = 8 << 20
	root := t.TempDir()
	dir := filepath.Join(root, "default")
	fakeBuild(t, dir, "default", int64(mib)<<20)
	bs, err := LoadBuilds([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqldb.OpenSQLite(context.Background(), filepath.Join(root, "reports.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// The simulated nodes share 127.0.0.1: the per-address bucket holds them all.
	srv, err := New(context.Background(), Options{Builds: bs, Store: st, SourceBurst: nodes})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: nodes, MaxConnsPerHost: 0, DisableCompression: true}}

	var (
		mu        sync.Mutex
		latencies []time.Duration
		errs      []string
		bytesIn   int64
		wg        sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	start := time.Now()
	for n := 0; n < nodes; n++ {
		wg.Add(1)
		go func(n int) {
			defer wg.Done()
			mac := fmt.Sprintf("52:54:00:10:%02x:%02x", n>>8, n&0xff)
			script, err := getBody(client, hs.URL+"/boot.ipxe?mac="+mac, "")
			if err != nil {
				fail("node %d script: %v", n, err)
				return
			}
			initrdURL, wantSum, token := parseScript(script)
			if initrdURL == "" || token == "" {
				fail("node %d: script without initrd or token:\n%s", n, script)
				return
			}
			h := sha256.New()
			var w io.Writer = countWriter{}
			if n < 10 {
				w = h
			}
			got := int64(0)
			buf := make([]byte, 256<<10)
			for off := int64(0); off < int64(mib)<<20; off += chunk {
				req, _ := http.NewRequest("GET", initrdURL, nil)
				req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+chunk-1))
				resp, err := client.Do(req)
				if err != nil {
					fail("node %d range %d: %v", n, off, err)
					return
				}
				k, err := io.CopyBuffer(onlyWriter{w}, resp.Body, buf)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusPartialContent || k != resp.ContentLength {
					fail("node %d range %d: %s, %d of %d bytes, %v", n, off, resp.Status, k, resp.ContentLength, err)
					return
				}
				got += k
			}
			if got != int64(mib)<<20 {
				fail("node %d: %d bytes, want %d", n, got, int64(mib)<<20)
			}
			if n < 10 && hex.EncodeToString(h.Sum(nil)) != wantSum {
				fail("node %d: initrd sha256 differs from the script's", n)
			}
			r := DemoReport(Epyc4GPU, n, false)
			r.Recipe.Name = "default"
			body, _ := selftest.Encode(r)
			t0 := time.Now()
			req, _ := http.NewRequest("POST", hs.URL+"/reports?node="+mac, bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := client.Do(req)
			if err != nil {
				fail("node %d POST: %v", n, err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			lat := time.Since(t0)
			if resp.StatusCode != http.StatusCreated {
				fail("node %d POST: %s", n, resp.Status)
				return
			}
			mu.Lock()
			latencies = append(latencies, lat)
			bytesIn += got
			mu.Unlock()
		}(n)
	}
	wg.Wait()
	elapsed := time.Since(start)
	for i, e := range errs {
		if i < 10 {
			t.Error(e)
		}
	}
	if len(errs) > 0 {
		t.Fatalf("%d nodes failed", len(errs))
	}
	stored, err := st.Count(context.Background())
	if err != nil || stored != int64(nodes) {
		t.Fatalf("%d reports stored, want %d (%v)", stored, nodes, err)
	}
	all, _ := st.Nodes(context.Background())
	for _, n := range all {
		if n.Reports != 1 {
			t.Errorf("node %s has %d reports, want 1", n.ID, n.Reports)
		}
	}
	slices.Sort(latencies)
	pct := func(p float64) time.Duration { return latencies[int(p*float64(len(latencies)-1))] }
	t.Logf("%d nodes, %d MiB initrd in %d MiB ranges: %.1f GiB in %.1fs = %.2f GiB/s; report POST latency p50 %v, p99 %v, max %v; %d reports stored",
		nodes, mib, chunk>>20, float64(bytesIn)/(1<<30), elapsed.Seconds(), float64(bytesIn)/(1<<30)/elapsed.Seconds(),
		pct(0.50).Round(100*time.Microsecond), pct(0.99).Round(100*time.Microsecond), latencies[len(latencies)-1].Round(100*time.Microsecond), stored)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// parseScript takes the initrd URL, its sha256 and the report token from a boot script.
func parseScript(s string) (initrdURL, sum, token string) {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 4 && f[0] == "#" && f[1] == "sha256" && f[3] == "initrd.img":
			sum = f[2]
		case len(f) == 4 && f[0] == "initrd":
			initrdURL = f[3]
		case len(f) > 0 && f[0] == "kernel":
			for _, a := range f {
				if v, ok := strings.CutPrefix(a, "peerboot.token="); ok {
					token = v
				}
			}
		}
	}
	return
}

func getBody(c *http.Client, url, token string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("%s: %s", resp.Status, b)
	}
	return string(b), err
}

// countWriter drops what it is given; onlyWriter hides ReadFrom so CopyBuffer uses
// the large buffer instead of io.Discard's small one.
type countWriter struct{}

func (countWriter) Write(p []byte) (int, error) { return len(p), nil }

type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(p []byte) (int, error) { return o.w.Write(p) }
