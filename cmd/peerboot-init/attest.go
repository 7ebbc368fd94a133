package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/go-tpm/tpm2/transport"

	"github.com/peerboot/peerboot/attest"
	"github.com/peerboot/peerboot/node/tpmquote"
)

// nodeTPM is the TPM the boot found, nil without one.
type nodeTPM struct {
	t    transport.TPMCloser
	path string
}

// openTPM finds the TPM, and extends PCR 11 with the phase word as
// systemd-pcrphase does when the initrd starts: the collector predicts PCR 11
// as the stub's measurements followed by "enter-initrd". Only when the stub
// measured (PCR 11 not zero): a kernel booted without systemd-stub has nothing
// to attest, so, as without a TPM, its reports go unattested under the token
// alone, and one console line says why.
func (m *machine) openTPM() *nodeTPM {
	if m.tpmOpen == nil {
		return nil
	}
	t, path, err := m.tpmOpen()
	if err != nil {
		m.say("TPM: none usable, reports go unattested: %v", err)
		return nil
	}
	pcrs, err := tpmquote.ReadPCRs(t)
	if err != nil {
		m.say("TPM %s: %v; reports go unattested", path, err)
		t.Close()
		return nil
	}
	if pcrs[tpmquote.PhasePCR] == ([32]byte{}) {
		// A kernel and initrd booted by iPXE's script, not through the stub: no
		// image was measured, so a quote could prove nothing and the collector
		// would refuse it. The report goes under the token, unattested.
		m.say("TPM %s: PCR 11 is zero (not booted through systemd-stub, so no image was measured): reports go unattested", path)
		t.Close()
		return nil
	}
	if err := tpmquote.ExtendPhase(t, attest.PhaseEnterInitrd); err != nil {
		m.say("TPM %s: %v", path, err)
	} else {
		m.say("TPM %s: PCR 11 %s (systemd-stub's measurements) extended with %q; PCR 4 %s, PCR 7 %s", path,
			pcrHex(pcrs, 11), attest.PhaseEnterInitrd, pcrHex(pcrs, 4), pcrHex(pcrs, 7))
	}
	return &nodeTPM{t: t, path: path}
}

// attestation is the Peerboot-Attestation header value for body, "" when
// there is no TPM or no nonce (then the console says why, and the report goes
// under the token alone). The nonce is peerboot.nonce= from the command line,
// else one the collector issues at POST .../attest/nonce.
func (m *machine) attestation(st *bootState, tpm *nodeTPM, body []byte) string {
	if tpm == nil {
		return ""
	}
	nonce := st.plan.nonce
	if nonce == "" && m.askNonce != nil {
		var err error
		if nonce, err = m.askNonce(nonceURL(st.plan.reportURL), st.plan.reportToken); err != nil {
			m.say("attestation: no nonce from the collector, the report goes unattested: %v", err)
			return ""
		}
	}
	if nonce == "" {
		m.say("attestation: no nonce (peerboot.nonce= or the collector's), the report goes unattested")
		return ""
	}
	ev, err := tpmquote.Quote(tpm.t, nonce, body, attest.PhaseEnterInitrd)
	if err != nil {
		m.say("attestation: %v; the report goes unattested", err)
		return ""
	}
	h, err := attest.Encode(ev)
	if err != nil {
		m.say("attestation: %v", err)
		return ""
	}
	m.say("TPM quote over PCRs 4, 7, 11 (PCR 11 %s) for nonce %s, report sha256 %s", short(ev.PCRs["11"]), nonce, short(ev.ReportSHA256))
	return h
}

// nonceURL is the collector's nonce endpoint beside the report URL: the path's
// last element (…/reports) becomes attest/nonce, the query (?node=) stays.
func nonceURL(reportURL string) string {
	u, err := url.Parse(reportURL)
	if err != nil {
		return reportURL
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/reports") + "/attest/nonce"
	return u.String()
}

// httpNonce asks the collector for a nonce: POST with the bearer token, the
// answer {"nonce":"…"}.
func httpNonce(nonceURL, token string) (string, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	req, err := http.NewRequest(http.MethodPost, nonceURL, nil)
	if err != nil {
		return "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", err
	}
	if resp.StatusCode/100 != 2 {
		return "", fmt.Errorf("%s: HTTP %s: %s", nonceURL, resp.Status, bytes.TrimSpace(b))
	}
	var v struct {
		Nonce string `json:"nonce"`
	}
	if err := json.Unmarshal(b, &v); err != nil || v.Nonce == "" {
		return "", errors.Join(fmt.Errorf("%s: want {\"nonce\":\"…\"}, got %q", nonceURL, clipBytes(b)), err)
	}
	return v.Nonce, nil
}

// realTPM opens the node's TPM device, making its node if devtmpfs has none.
func realTPM(m *machine) func() (transport.TPMCloser, string, error) {
	return func() (transport.TPMCloser, string, error) {
		path, err := tpmquote.Device(m.path("/sys"), m.path("/dev"), m.mknod)
		if err != nil {
			return nil, "", err
		}
		t, err := tpmquote.Open(path)
		return t, path, err
	}
}

func pcrHex(pcrs map[int][32]byte, i int) string {
	v := pcrs[i]
	return short(hex.EncodeToString(v[:]))
}

func short(h string) string {
	if len(h) > 16 {
		return h[:16] + "…"
	}
	return h
}

func clipBytes(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "…"
	}
	return string(b)
}
