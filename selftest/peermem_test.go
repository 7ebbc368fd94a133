package selftest

import (
	"strings"
	"testing"
)

// The peer-memory section and the per-GPU mode came after schema 2 shipped: a report
// without them still decodes (and re-encodes without them), one with them round-trips,
// and Validate refuses values the schema does not know.
func TestPeerMemAndModeCompatible(t *testing.T) {
	old := New()
	old.GPUs = []GPU{{BDF: "0000:01:00.0", IOMMUGroup: -1}}
	b, err := Encode(old)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "peer_mem") || strings.Contains(string(b), "p2p_mode") {
		t.Fatalf("a report without the new parts names them:\n%s", b)
	}
	if r, err := Decode(b); err != nil || r.PeerMem != nil || r.GPUs[0].P2PMode != "" {
		t.Fatalf("old report: %v %+v", err, r)
	}

	r := New()
	r.GPUs = []GPU{{BDF: "0000:01:00.0", IOMMUGroup: -1, P2PMode: P2PModeDynamic, P2PModeLine: "NVRM: peerboot-p2p: bar1-mode gpu=0 pci=0000:01:00.0 mode=dynamic why=bar1-below-fb"}}
	r.PeerMem = []PeerMem{{Kind: MemManaged, Bytes: 1 << 20, Calls: []string{"cuMemAllocManaged(1 MiB, CU_MEM_ATTACH_GLOBAL) on GPU 0"}, Step: StepPeerWrite,
		Mismatch: &Mismatch{Offset: 8, Want: 1, Got: 2, Words: 1}}}
	b, err = Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if b2, _ := Encode(back); string(b2) != string(b) {
		t.Errorf("round trip changed the report:\n%s\n%s", b, b2)
	}
	if s := Summary(back); !strings.Contains(s, "numa 0 p2p dynamic\n") {
		t.Errorf("summary lacks the mode:\n%s", s)
	}
	if s := Render(back); !strings.Contains(s, "GPU0  0000:01:00.0  dynamic  bar1-below-fb") || !strings.Contains(s, "CORRUPT in the peer write at byte 0x8 (1 words)") {
		t.Errorf("render:\n%s", s)
	}

	for _, tc := range []struct {
		mutate func(r *Report)
		want   string
	}{
		{func(r *Report) { r.GPUs[0].P2PMode = "turbo" }, `gpus[0].p2p_mode: "turbo", want static, dynamic, none or empty`},
		{func(r *Report) { r.PeerMem[0].Kind = "pinned" }, `peer_mem[0].kind: "pinned", want managed, vmm, ipc or cudaipc`},
		{func(r *Report) { r.PeerMem[0].Owner = 3 }, "peer_mem[0].owner: 3, want 0..0"},
		{func(r *Report) { r.PeerMem[0].Verified = true }, "peer_mem[0].verified: true with a mismatch"},
	} {
		bad, _ := Decode(b)
		tc.mutate(bad)
		if err := Validate(bad); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate: %v, want %q", err, tc.want)
		}
	}
}
