package netboot

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/peerboot/peerboot/selftest"
)

// FuzzDecodeReport: any body is accepted or refused with 400 or 422, never a panic,
// and whatever is accepted can be drawn (heatmap, NCCL curve, diff).
func FuzzDecodeReport(f *testing.F) {
	// Seeds stay small (a 2-GPU report, compact): the fuzzer stalls on 30 KB inputs.
	small := DemoReport(Epyc4GPU, 1, true)
	small.GPUs, small.Pairs = small.GPUs[:2], small.Pairs[:1]
	var copies []selftest.Copy
	for _, c := range small.Copies {
		if c.Src < 2 && c.Dst < 2 {
			copies = append(copies, c)
		}
	}
	small.Copies, small.NCCL.Sizes = copies, small.NCCL.Sizes[:3]
	small.Recipe.Name = "default"
	b, _ := json.Marshal(small)
	f.Add(b)
	f.Add([]byte(`{"schema":2,"verdict":"pass","pairs":[{"a":0,"b":900000000}]}`))
	f.Add([]byte(`{"schema":2,"verdict":"fail","copies":[{"src":63,"dst":0,"method":"ce","direction":"write","gbps":1e300}]}`))
	f.Add([]byte(`{"schema":2,"verdict":"pass","nccl":{"sizes":[{"bytes":1,"busbw":0},{"bytes":1,"busbw":0}]}}`))
	f.Add([]byte(`[]`))
	// Issue 15 item 8: bytes after the report were stored and served back as JSON.
	f.Add(append(append([]byte{}, b...), "<html><script>alert(1)</script>"...))
	f.Add(append(append([]byte{}, b...), `{"schema":2}`...))
	f.Add(append(append([]byte{}, b...), " \n"...))
	f.Fuzz(func(t *testing.T, body []byte) {
		rep, status, err := decodeReport(body)
		if err != nil {
			if status != http.StatusBadRequest && status != http.StatusUnprocessableEntity {
				t.Fatalf("status %d for %v", status, err)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted a body that is not exactly one JSON value: %q", body)
		}
		if h := NewHeatmap(rep); h != nil && len(h.Cells) > 64 {
			t.Fatalf("%d heatmap rows", len(h.Cells))
		}
		NewCurve(rep)
		DiffReports(rep, rep)
	})
}
