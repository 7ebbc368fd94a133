package netboot

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/internal/swtpmtest"
)

// A build with no PCR 11 prediction (no UKI to predict it from, or the
// predictor failed) attests nothing: a genuine quote from a TPM whose PCR 11
// nothing measured (all zeros: a PXE kernel boot without systemd-stub) is
// refused, not compared against an all-zero "prediction" and passed.
// (Issue 35: no test failed when the collector compared against zeros.)
func TestAttestationNeedsAPrediction(t *testing.T) {
	noUKI := func([]byte) ([32]byte, error) { return [32]byte{}, errors.New("SYNTHETIC: this build has no UKI") }
	e := newEnv(t, Options{PredictPCR11: noUKI, RateBurst: 100, SourceBurst: 100})
	const mac = "52:54:00:aa:00:09"
	b := e.build(t, "default")
	tok := e.srv.Token(b.ID, mac)
	tp := swtpmtest.Start(t)
	nonce := e.bootNonce(t, mac) // PCR 11 is left unmeasured: zeros
	body := reportBody(t, Epyc4GPU, 0, false)
	ev, hdr := quoted(t, tp, nonce, body)
	if ev.PCRs["11"] != strings.Repeat("0", 64) {
		t.Fatalf("the fresh TPM's PCR 11 is %s, want zeros", ev.PCRs["11"])
	}
	resp, out := e.postAttested(t, "/reports?node="+mac, tok, hdr, body)
	if resp.StatusCode != 403 || !strings.Contains(out, "no PCR 11 prediction for build "+b.ID) || !strings.Contains(out, "this build has no UKI") {
		t.Fatalf("a quote against a build without a prediction: %d %s, want 403 naming the missing prediction", resp.StatusCode, out)
	}
	if n, _ := e.store.Count(context.Background()); n != 0 {
		t.Fatalf("%d reports stored", n)
	}
	if ak, _ := e.store.NodeAK(context.Background(), mac); ak != nil {
		t.Fatalf("an AK was recorded from a refused quote: %+v", ak)
	}
}
