package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peerboot/peerboot/attest"
	"github.com/peerboot/peerboot/measure"
)

// The default image's UKI booted as a measured boot: OVMF with a TPM 2.0
// (swtpm), network-booted through the NIC's iPXE EFI ROM, which chains the UKI
// over HTTP with the report URL and a nonce as its load options. The stub
// measures the UKI's sections into PCR 11, the init extends "enter-initrd"
// and POSTs its report with a quote; the quote must pass attest.Verify with
// PCR 11 equal to measure.Predict of the same UKI. The collector itself (the
// nonce store, the AK record, the page) is the attest tests' business: here a
// bare HTTP server takes the POST.
func TestTPMQuoteFromUEFIBoot(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the default image and boots it in QEMU with swtpm")
	}
	outRoot := t.TempDir()
	fetchBuildDefault(t, outRoot)
	ukiPath := filepath.Join(outRoot, "default", "peerboot.efi")
	uki, err := os.ReadFile(ukiPath)
	if err != nil {
		t.Fatal(err)
	}
	pred, err := measure.Predict(uki)
	if err != nil {
		t.Fatal(err)
	}
	want, ok := pred.Value(attest.PhaseEnterInitrd)
	if !ok {
		t.Fatalf("no %s prediction in %+v", attest.PhaseEnterInitrd, pred)
	}

	type post struct {
		header string
		body   []byte
	}
	var mu sync.Mutex
	var posts []post
	mux := http.NewServeMux()
	mux.HandleFunc("GET /peerboot.efi", func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, ukiPath) })
	mux.HandleFunc("POST /reports", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		posts = append(posts, post{r.Header.Get(attest.Header), b})
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	const nonce = "e2e-nonce-1"
	script := fmt.Sprintf("#!ipxe\nchain http://10.0.2.2:%d/peerboot.efi console=ttyS0,115200 panic=-1 peerboot.on_pass=poweroff peerboot.on_fail=poweroff "+
		"peerboot.report_url=http://10.0.2.2:%d/reports?node=tpm-node peerboot.token=t0k peerboot.nonce=%s || shell\n", port, port, nonce)
	res, console := bootWithTPM(t, script, filepath.Join(t.TempDir(), "tpm"))
	t.Logf("UEFI network boot with a TPM (%s): %s to the report POST", res.Accel, res.Duration.Round(100*time.Millisecond))
	if res.TimedOut {
		t.Fatalf("the boot timed out:\n%s", tailOf(console, 40))
	}
	// TPMEventLog=: OVMF handed the kernel its TCG2 event log (it measured).
	for _, line := range []string{"TPMEventLog=", `extended with "enter-initrd"`, "TPM quote over PCRs 4, 7, 11", "report POSTed"} {
		if !strings.Contains(console, line) {
			t.Errorf("console lacks %q:\n%s", line, tailOf(console, 40))
		}
	}
	t.Logf("%s\n%s", lineWith(console, `extended with "enter-initrd"`), lineWith(console, "TPM quote"))
	mu.Lock()
	defer mu.Unlock()
	if len(posts) != 1 || posts[0].header == "" {
		t.Fatalf("want one POST with the %s header, got %d: %+v", attest.Header, len(posts), posts)
	}
	ev, err := attest.Decode(posts[0].header)
	if err != nil {
		t.Fatal(err)
	}
	zero := strings.Repeat("0", 64)
	if ev.PCRs["4"] == zero || ev.PCRs["7"] == zero {
		t.Errorf("OVMF measured nothing: PCR 4 %s, PCR 7 %s", ev.PCRs["4"], ev.PCRs["7"])
	}
	got, err := attest.Verify(ev, posts[0].body, attest.Expect{Nonce: nonce, PCR11: want})
	if err != nil {
		t.Fatalf("the boot's evidence fails the collector's check: %v\nPCRs %v", err, ev.PCRs)
	}
	t.Logf("verified: AK %s, PCR 4 %s, PCR 7 %s, PCR 11 %x (predicted)", got.AKName, ev.PCRs["4"], ev.PCRs["7"], want)
}
