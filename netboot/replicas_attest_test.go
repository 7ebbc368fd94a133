package netboot

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/swtpmtest"
)

// TestAttestedRaceOneNonce: two different reports quoted with one nonce, POSTed at
// once: both pass the checks, one is stored, the other refused 409 when its
// transaction finds the nonce spent.
func TestAttestedRaceOneNonce(t *testing.T) {
	e := newEnv(t, Options{PredictPCR11: stubPCR11, RateBurst: 100, SourceBurst: 100, EnrollAll: time.Hour})
	const mac = "52:54:00:aa:00:07"
	b := e.build(t, "default")
	uki, err := os.ReadFile(filepath.Join(b.Dir, "peerboot.efi"))
	if err != nil {
		t.Fatal(err)
	}
	tok := e.srv.Token(b.ID, mac)
	tp := swtpmtest.Start(t)
	nonce := e.bootNonce(t, mac)
	measureBoot(t, tp, uki)
	var bodies [2][]byte
	var hdrs [2]string
	for i := range bodies {
		bodies[i] = reportBody(t, Epyc4GPU, 10+i, false)
		_, hdrs[i] = quoted(t, tp, nonce, bodies[i])
	}
	var wg sync.WaitGroup
	var codes [2]int
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, _ := e.postAttested(t, "/reports?node="+mac, tok, hdrs[i], bodies[i])
			codes[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	if !(codes[0] == 201 && codes[1] == 409 || codes[0] == 409 && codes[1] == 201) {
		t.Errorf("answers %v, want one 201 and one 409", codes)
	}
	if n, _ := e.store.Count(context.Background()); n != 1 {
		t.Errorf("%d reports stored, want 1", n)
	}
}
