package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peerboot/peerboot/attest"
	"github.com/peerboot/peerboot/measure"
	"github.com/peerboot/peerboot/selftest"
)

// reportPost is one POST /reports the recording proxy passed to serve.
type reportPost struct {
	header string
	body   []byte
	status int
	answer string
}

// TestAttestedReportFromServe is issue 18's end to end: `peerboot serve` is the
// collector, a node boots the default image's UKI by UEFI network boot (OVMF,
// the NIC's iPXE EFI ROM, no Secure Boot) with swtpm as its TPM, asks POST
// /attest/nonce for a nonce and POSTs its report with a quote. Two boots, the
// same TPM state (the same AK):
//
//	(a) the UKI serve serves (/uefi/boot.efi): stored attested, on the page;
//	(b) that UKI with one byte of .cmdline changed, from elsewhere: refused,
//	    "PCR 11 mismatch" (unsigned: without Secure Boot OVMF runs it; the
//	    stub measures .cmdline into PCR 11 although iPXE's arguments replace it);
//	(c) boot (a)'s evidence with another body: refused, "nonce already used"
//	    (with its own body: the stored report's duplicate, not a second one);
//	(d) a forged report under the token alone: stored unattested.
//
// The operator opens an AK enrollment window for the node first (peerboot
// rollout enroll, with the operator token serve created).
//
// A proxy in front of serve records the node's POSTs, so (c) replays the bytes
// the node sent.
func TestAttestedReportFromServe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the default image and boots it twice in QEMU with swtpm")
	}
	outRoot := t.TempDir()
	fetchBuildDefault(t, outRoot)
	uki, err := os.ReadFile(filepath.Join(outRoot, "default", "peerboot.efi"))
	if err != nil {
		t.Fatal(err)
	}
	changed, where := changeCmdlineByte(t, uki)
	changedPath := filepath.Join(t.TempDir(), "changed.efi")
	if err := os.WriteFile(changedPath, changed, 0o644); err != nil {
		t.Fatal(err)
	}
	p1, _ := measure.Predict(uki)
	p2, _ := measure.Predict(changed)
	v1, _ := p1.Value(attest.PhaseEnterInitrd)
	v2, _ := p2.Value(attest.PhaseEnterInitrd)
	if v1 == v2 {
		t.Fatalf("changing %s left the predicted PCR 11 %x", where, v1)
	}

	const token = "e2e-attest-static-token"
	srv := startServe(t, "--out", outRoot, "--db", filepath.Join(t.TempDir(), "reports.db"), "--report-token", token,
		"--burst", "10") // (a), (c) twice and (d) come within seconds
	// The node's first AK is recorded only inside an enrollment window the operator
	// opens (issue 28), with the operator token serve created under --out.
	if out, code := peerboot(t, "rollout", "enroll", "tpm-node", "--for", "2h", "--server", "http://"+srv.base,
		"--operator-token", filepath.Join(outRoot, "operator.token")); code != 0 {
		t.Fatalf("rollout enroll: exit %d\n%s", code, out)
	}
	target, _ := url.Parse("http://" + srv.base)
	var mu sync.Mutex
	var posts []reportPost
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method != http.MethodPost || resp.Request.URL.Path != "/reports" {
			return nil
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body = io.NopCloser(bytes.NewReader(b))
		mu.Lock()
		posts[len(posts)-1].status, posts[len(posts)-1].answer = resp.StatusCode, string(b)
		mu.Unlock()
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /changed.efi", func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, changedPath) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/reports" {
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
			mu.Lock()
			posts = append(posts, reportPost{header: r.Header.Get(attest.Header), body: b})
			mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxy := &http.Server{Handler: mux}
	go proxy.Serve(ln)
	t.Cleanup(func() { proxy.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	tpmState := filepath.Join(t.TempDir(), "tpm")
	const node = "tpm-node"

	boot := func(ukiPath string) string {
		t.Helper()
		script := fmt.Sprintf("#!ipxe\nchain http://10.0.2.2:%d%s console=ttyS0,115200 panic=-1 peerboot.on_pass=poweroff peerboot.on_fail=poweroff "+
			"peerboot.report_url=http://10.0.2.2:%d/reports?node=%s peerboot.token=%s || shell\n", port, ukiPath, port, node, token)
		res, console := bootWithTPM(t, script, tpmState)
		t.Logf("UEFI network boot of %s with a TPM (%s): %s to the report POST", ukiPath, res.Accel, res.Duration.Round(100*time.Millisecond))
		if res.TimedOut {
			t.Fatalf("the boot of %s timed out:\n%s\nserver:\n%s", ukiPath, tailOf(console, 40), srv.logs.String())
		}
		if !strings.Contains(console, "TPM quote over PCRs 4, 7, 11") {
			t.Fatalf("the node made no quote:\n%s", tailOf(console, 40))
		}
		return console
	}
	last := func() reportPost {
		mu.Lock()
		defer mu.Unlock()
		if len(posts) == 0 {
			t.Fatalf("the node POSTed no report\nserver:\n%s", srv.logs.String())
		}
		return posts[len(posts)-1]
	}
	type nodeAPI struct {
		Latest *struct {
			Verdict, Attestation string
			AKName               string `json:"ak_name"`
		} `json:"latest"`
		History  []struct{ Attestation string } `json:"history"`
		Refusals []struct{ Reason string }      `json:"refusals"`
	}

	// (a) The served UKI: attested, in the database and on the page.
	console := boot("/uefi/boot.efi")
	a := last()
	if a.header == "" || a.status != http.StatusCreated || !strings.Contains(a.answer, `"attestation":"attested"`) {
		t.Fatalf("(a) the served UKI's report: %d %s (header %t)\nconsole: %s\nserver:\n%s", a.status, a.answer, a.header != "", lineWith(console, "attestation"), srv.logs.String())
	}
	var n nodeAPI
	srv.getJSON(t, "/api/nodes/"+node, &n)
	if n.Latest == nil || n.Latest.Attestation != "attested" || n.Latest.Verdict != selftest.Pass {
		t.Fatalf("(a) API: %+v", n.Latest)
	}
	page := attestGet(t, "http://"+srv.base+"/nodes/"+node)
	if !strings.Contains(page, `data-attestation="attested"`) {
		t.Errorf("(a) the node page does not show the report attested")
	}
	t.Logf("(a) stored attested, AK %s", n.Latest.AKName)

	// (c) Boot (a)'s evidence replayed: with its own body it is the retry of a
	// stored report (200, the same id, nothing new stored); with another body it
	// is refused, the nonce spent.
	rep, err := selftest.Decode(a.body)
	if err != nil {
		t.Fatal(err)
	}
	rep.Kernel.Cmdline += " forged"
	forged, err := selftest.Encode(rep)
	if err != nil {
		t.Fatal(err)
	}
	status, answer := attestPost(t, "http://"+srv.base+"/reports?node="+node, token, a.header, a.body)
	if status != http.StatusOK || !strings.Contains(answer, `"duplicate":true`) {
		t.Errorf("(c) the same bytes again: %d %s", status, answer)
	}
	status, answer = attestPost(t, "http://"+srv.base+"/reports?node="+node, token, a.header, forged)
	if status != http.StatusConflict || !strings.Contains(answer, "nonce already used") {
		t.Errorf("(c) replayed evidence, another body: %d %s", status, answer)
	}

	// (d) The forged report under the token alone: stored, unattested.
	status, answer = attestPost(t, "http://"+srv.base+"/reports?node="+node, token, "", forged)
	if status != http.StatusCreated || !strings.Contains(answer, `"attestation":"unattested"`) {
		t.Errorf("(d) forged, token only: %d %s", status, answer)
	}

	// (b) The UKI with one byte of .cmdline changed: the quote is refused.
	console = boot("/changed.efi")
	b := last()
	if b.header == "" || b.status != http.StatusForbidden || !strings.Contains(b.answer, "PCR 11 mismatch") {
		t.Errorf("(b) changed UKI (%s): %d %s\nconsole: %s", where, b.status, b.answer, lineWith(console, "report POST"))
	}
	t.Logf("(b) %d %s", b.status, strings.TrimSpace(b.answer))
	n = nodeAPI{}
	srv.getJSON(t, "/api/nodes/"+node, &n)
	var states, reasons []string
	for _, h := range n.History {
		states = append(states, h.Attestation)
	}
	for _, r := range n.Refusals {
		reasons = append(reasons, r.Reason)
	}
	if got := strings.Join(states, " "); got != "unattested attested" {
		t.Errorf("history %q, want (d) unattested then (a) attested", got)
	}
	if all := strings.Join(reasons, "\n"); !strings.Contains(all, "PCR 11 mismatch") || !strings.Contains(all, "nonce already used") {
		t.Errorf("refusals on the node lack (b) and (c):\n%s", all)
	}
	if page := attestGet(t, "http://"+srv.base+"/nodes/"+node); !strings.Contains(page, "PCR 11 mismatch") {
		t.Errorf("the node page does not show the PCR 11 refusal")
	}
}

// changeCmdlineByte returns uki with one byte of its .cmdline section changed
// (a digit made another, else a letter), and says which.
func changeCmdlineByte(t *testing.T, uki []byte) ([]byte, string) {
	t.Helper()
	img, err := measure.ParsePE(uki)
	if err != nil {
		t.Fatal(err)
	}
	sec, ok := img.Lookup(".cmdline")
	if !ok {
		t.Fatal("the UKI has no .cmdline")
	}
	out := bytes.Clone(uki)
	start, end := int(sec.PointerToRaw), int(sec.PointerToRaw)+int(min(sec.VirtualSize, sec.SizeOfRawData))
	for i := start; i < end; i++ {
		c := out[i]
		switch {
		case c >= '0' && c <= '8':
			out[i] = c + 1
		case c >= 'a' && c <= 'y':
			out[i] = c + 1
		default:
			continue
		}
		return out, fmt.Sprintf(".cmdline byte %d %q -> %q", i-start, c, out[i])
	}
	t.Fatal("nothing to change in .cmdline")
	return nil, ""
}

func attestGet(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func attestPost(t *testing.T, u, token, header string, body []byte) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	if header != "" {
		req.Header.Set(attest.Header, header)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
